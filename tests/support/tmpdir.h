/* tests/support/tmpdir.h — a fresh temporary directory for each test: made
 * by the suite's .init, removed with everything in it by its .fini.
 *
 *     static void setup(void) { rt_tmpdir_make("remat_hf_test"); }
 *     TestSuite(hf, .init = setup, .fini = rt_tmpdir_remove);
 *     ... fopen(rt_tmpdir_path("a.safetensors"), "wb") ...
 */
#ifndef REMAT_TEST_TMPDIR_H
#define REMAT_TEST_TMPDIR_H

/* Makes /tmp/<prefix>_XXXXXX (mkdtemp; asserts success) and returns its
 * path, which stays valid until the next rt_tmpdir_make. */
const char *rt_tmpdir_make(const char *prefix);
/* The directory rt_tmpdir_make made last. */
const char *rt_tmpdir(void);
/* Removes the directory and everything under it (asserts success; no
 * shell): for a suite's .fini. */
void rt_tmpdir_remove(void);
/* "<dir>/<name>" in one of 4 rotating buffers: the last 4 results stay
 * valid, so a call may take up to 4 paths. */
const char *rt_tmpdir_path(const char *name);

/* The names in the directory's subdirectory `sub` ("" for the directory
 * itself), sorted and separated by spaces ("" when empty), in a buffer
 * valid until the next call. */
const char *rt_tmpdir_list(const char *sub);

#endif /* REMAT_TEST_TMPDIR_H */
