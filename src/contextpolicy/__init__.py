from ._kernel import kernel_info
