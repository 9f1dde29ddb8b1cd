/* tools/io/tokenize.h — `remat tokenize`: a text file to an llm.c .bin token file. */
#ifndef REMAT_TOOLS_TOKENIZE_H
#define REMAT_TOOLS_TOKENIZE_H

#include <stdio.h>

/* `remat tokenize ARGS` (argv[0] is "tokenize"): the exit status (0, 1 on a
 * failure, 2 on a usage error). */
int cmd_tokenize(int argc, char **argv);
void tokenize_usage(FILE *f);

#endif
