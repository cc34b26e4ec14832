"""C kernels for the CPU, compiled once per machine on first use (build.py) and called through ctypes.

paged_decode.c / .py   decode attention over the paged pool in place: every sequence of a group in one call
"""
