"""Why mixed precision does (not) pay off: ``rules`` (one function per rule, and their
order), the CPU's 16-bit rules (``cpu``), the rules that read the profiled window's kernels
(``kernels``), a serving group's rules (``serving``) and the machine's other work, in words
(``busy``)."""
