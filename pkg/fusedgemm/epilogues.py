"""Epilogue names of the 8-bit GEMM (kept for compatibility): they live in fusedgemm.epilogue.presets."""
from .epilogue.presets import ACTIVATIONS, EPILOGUES, parse_name as parse_epilogue

__all__ = ["ACTIVATIONS", "EPILOGUES", "parse_epilogue"]
