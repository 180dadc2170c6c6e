/* The store (store/store.h and its concern headers) without PostgreSQL, for
 * the harnesses that drive the scheduler (fuzz_wmsg, fuzz_route): linked
 * instead of ss_store, it answers every query through the caller's callback
 * on a later turn of the caller's loop (never before the call returns, as
 * libpq does), one statement per connection per turn, in order, with
 * plausible rows. What each answer is comes from a script of bytes the
 * harness takes from its input, one byte per answer, in the order the
 * answers are given (none left: success, variant 0):
 *   byte & 7 == 1  the statement fails (SS_EQUERY)
 *   byte & 7 == 2  the connection is lost (SS_ECONN)
 *   byte & 7 == 3  the connection is lost and stays down (db_ready 0)
 *   otherwise      success; byte >> 3 picks among the plausible answers
 *                  (a run claimed or not, a stale attempt, rows 0 or 1...) */
#ifndef SS_TESTS_FUZZ_STORE_STUB_H
#define SS_TESTS_FUZZ_STORE_STUB_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* store_users_load's member (user 2, "ann"): a token and its SHA-256 */
#define STORE_STUB_MEMBER_TOKEN "stub-member-token-0123456789"
#define STORE_STUB_MEMBER_HASH "24458ac21b7aed15ec702b95e1c03c57e9e04d327486d97c6060b6838ab420b2"

/* Sets the script (not copied: valid until the next call) and brings every
 * connection up again. */
void store_stub_script(const uint8_t *bytes, size_t n);
/* Statements queued on every connection and not yet answered. */
int store_stub_pending(void);

/* The scheduler's connections (s->db, db_submit, reads, the worker port's
 * db and db_metrics), opened on loop as sched.c opens them, and closed
 * (their close callbacks run on the loop's next turns). */
struct sched;
void store_stub_sched_open(struct sched *s, uv_loop_t *loop);
void store_stub_sched_close(struct sched *s);

#endif
