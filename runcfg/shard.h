/* The header of a token shard (llm.c format: 256 x int32, magic, version,
 * token count, zeros), read without the trainer: the planner counts the
 * tokens a run's shards hold. The trainer writes and loads shards
 * (trainer/data.h) with these constants. */
#ifndef SS_RUNCFG_SHARD_H
#define SS_RUNCFG_SHARD_H

#include <stdint.h>

#define RCFG_SHARD_MAGIC 20240520
#define RCFG_SHARD_VERSION 1
#define RCFG_SHARD_HEADER_INTS 256

/* Tokens the header of the shard at path counts; -1 when the file cannot
 * be read or does not start with the shard magic. */
int64_t rcfg_shard_tokens(const char *path);

#endif
