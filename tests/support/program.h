/* tests/support/program.h — running the programs the build made, as a user
 * runs them: the test binary's siblings in the build directory.
 *
 *     const char *bin = rt_program_path("remat");
 *     char *out;
 *     int status = rt_program_run(&out, "'/path/remat' train --steps 1 2>&1");
 *     ... free(out);
 */
#ifndef REMAT_TEST_PROGRAM_H
#define REMAT_TEST_PROGRAM_H

/* dirname(/proc/self/exe) + "/" + name, asserted executable; the result
 * stays valid until the next call. */
const char *rt_program_path(const char *name);

/* Runs the shell command `cmd` (popen), reads all its standard output into
 * *out (NUL-terminated, the caller frees) and returns its exit status, or
 * 128 + the signal that ended it. */
int rt_program_run(char **out /* OUT */, const char *cmd);

#endif /* REMAT_TEST_PROGRAM_H */
