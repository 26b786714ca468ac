"""Errors of the emulator: each names the kernel and, when executing, the instruction."""
from __future__ import annotations


class EmulatorError(RuntimeError):
    pass


class LoadError(EmulatorError):
    """The code object, kernel or listing cannot be loaded (before anything executes)."""


class UnknownInstruction(EmulatorError):
    """An instruction the emulator does not model: never executed silently."""


class MemoryFault(EmulatorError):
    """An access outside every buffer the launch registered."""


class HazardError(EmulatorError):
    """A hazard the hardware would not catch: an LDS race between waves, ..."""


class LaunchError(EmulatorError):
    """Bad launch parameters (zero grid, short kernarg buffer, LDS over the arch's limit, ...)."""
