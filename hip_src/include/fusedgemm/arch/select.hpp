// Picks the arch header for the target being compiled. Exactly one branch is taken; an unknown target is
// a compile error, never a silent default.
#pragma once
#include "../platform.hpp"

#if defined(FG_HOST)
#include "host.hpp"
#elif defined(FG_NVIDIA)
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ != 900)
#error "fusedgemm's CUDA kernels target sm_90a only"
#endif
#include "sm90.hpp"
#elif defined(__gfx942__)
#include "gfx942_mfma.hpp"
#elif defined(__gfx950__)
#include "gfx950_mfma.hpp"
#elif defined(__HIP_DEVICE_COMPILE__)
#error "fusedgemm: unsupported AMD target (supported: gfx942, gfx950)"
#endif
