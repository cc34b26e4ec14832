"""C kernels for the CPU, compiled once per machine on first use (build.py) and called through ctypes.

paged_decode.c / .py   decode attention over the paged pool in place: every sequence of a group in one call
panel_linear.c / .py   a linear from weights packed in panels of one vector's outputs, summed in MKL's order (its bits)
"""
