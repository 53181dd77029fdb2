/* Compiled (not run) by the abi-check crate's tests: the header's
 * _Static_asserts fix the public structs' LP64 layouts, and this makes a C11
 * compiler check them even where no other C test is built. */
#include "lmdbio.h"

#if !defined(__LP64__)
#error "the asserted layouts are those of LP64 systems"
#endif

int lmdbio_layout_checked(void);
