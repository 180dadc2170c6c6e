/* Which code this is: the project's version and the source tree's commit
 * ("0.1.0+5c01e1b2a4f0", "-dirty" when the tree had uncommitted changes,
 * "+unknown" without git), as recorded with every run (runs.code_version). */
#ifndef SS_COMMON_VERSION_H
#define SS_COMMON_VERSION_H

const char *ss_version(void);

#endif
