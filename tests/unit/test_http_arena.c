/* arena.c: http_alloc hands out aligned, independent blocks, large ones
 * included (the handler's /arena route fills and checks 64 of them). */
#include "check.h"
#include "http_client.h"

static void scenarios(void) {
  /* the arena hands out aligned, independent blocks, large ones included */
  check_status(ht.port[SRV_MAIN], "GET /arena HTTP/1.1\r\n\r\n", 200, "\"ok\"");
}

int main(void) {
  CHECK_INT_EQ(http_harness_main(scenarios), 0);
  CHECK(ht.arena_ok);
  CHECK_DONE();
}
