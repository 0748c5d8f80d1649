/*
 * interrupt.c - interrupt ping-pong between two processes.
 *
 * Each side creates a local interrupt with a fixed number (server: -intno,
 * client: -intno + 1) and connects to the other side's.  Then:
 *   phase 1: the client triggers, the server answers, -loops times;
 *   phase 2: the server triggers, the client answers, -loops times.
 * Each side prints the average round-trip time of the phase it started.
 *
 *   interrupt -server [-rn CLIENT_NODE] [-loops N] [-intno N]
 *   interrupt -client [-rn SERVER_NODE] [-loops N] [-intno N]
 *
 * Both sides must use the same -loops and -intno.  -rn defaults to this
 * node.  How a wait sleeps is chosen with VSCI_WAIT=poll|block|adaptive.
 */
#include "common/example.h"

#define DEFAULT_INTNO 0x40

/* Trigger `out` and wait for `in`, `loops` times; returns microseconds. */
static uint64_t ping(sci_remote_interrupt_t out, sci_local_interrupt_t in, unsigned int loops)
{
    sci_error_t err;
    uint64_t t0 = now_us();
    for (unsigned int i = 0; i < loops; i++) {
        SCITriggerInterrupt(out, NO_FLAGS, &err);
        DIE_ON_ERROR(err, "SCITriggerInterrupt");
        SCIWaitForInterrupt(in, timeout_ms, NO_FLAGS, &err);
        DIE_ON_ERROR(err, "SCIWaitForInterrupt");
    }
    return now_us() - t0;
}

/* Wait for `in` and answer on `out`, `loops` times. */
static void pong(sci_remote_interrupt_t out, sci_local_interrupt_t in, unsigned int loops)
{
    sci_error_t err;
    for (unsigned int i = 0; i < loops; i++) {
        SCIWaitForInterrupt(in, timeout_ms, NO_FLAGS, &err);
        DIE_ON_ERROR(err, "SCIWaitForInterrupt");
        SCITriggerInterrupt(out, NO_FLAGS, &err);
        DIE_ON_ERROR(err, "SCITriggerInterrupt");
    }
}

static void report(const char *who, unsigned int loops, uint64_t us)
{
    double rtt = loops ? (double)us / loops : 0.0;
    printf("%s: %u round trips in %.3f ms: average round trip %.2f us (one way %.2f us)\n",
           who, loops, us / 1000.0, rtt, rtt / 2);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: interrupt -server|-client [-rn NODE] [-loops N] [-intno N] [-a ADAPTER]\n"
            "                 [-timeout MS]\n"
            "  -rn NODE   the other side's node id (default: this node)\n"
            "  -loops N   round trips per phase (default 1000)\n"
            "  -intno N   server's interrupt number; the client uses N+1 (default %u)\n",
            DEFAULT_INTNO);
    exit(2);
}

int main(int argc, char **argv)
{
    int server = -1;
    unsigned int remote_node = 0, loops = 1000, base = DEFAULT_INTNO;
    sci_error_t err;

    example_name = "interrupt";
    for (int i = 1; i < argc; i++) {
        if (common_option(argc, argv, &i, &server, &remote_node))
            continue;
        if (!strcmp(argv[i], "-loops"))
            loops = opt_uint(argc, argv, &i);
        else if (!strcmp(argv[i], "-intno"))
            base = opt_uint(argc, argv, &i);
        else
            usage();
    }
    if (server < 0)
        usage();
    const char *who = server ? "server" : "client";

    sci_desc_t sd = open_descriptor();                 /* SCIInitialize, SCIOpen */
    unsigned int local_node = local_node_id();
    if (remote_node == 0)
        remote_node = local_node;

    /* My interrupt, with exactly the agreed number. */
    unsigned int my_no = server ? base : base + 1, peer_no = server ? base + 1 : base;
    sci_local_interrupt_t in;
    SCICreateInterrupt(sd, &in, adapter, &my_no, NULL, NULL, SCI_FLAG_FIXED_INTNO, &err);
    if (err == SCI_ERR_BUSY)
        fail("interrupt %u is taken on this node (another %s running? try -intno)", my_no, who);
    DIE_ON_ERROR(err, "SCICreateInterrupt");

    /* The other side's interrupt: wait until it exists. */
    printf("%s: node %u, interrupt %u; connecting to interrupt %u on node %u\n", who,
           local_node, my_no, peer_no, remote_node);
    fflush(stdout);
    sci_remote_interrupt_t out;
    SCIConnectInterrupt(sd, &out, remote_node, adapter, peer_no, timeout_ms, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIConnectInterrupt");

    /* Phase 1: the client pings.  Phase 2: the server pings. */
    if (server) {
        pong(out, in, loops);
        report(who, loops, ping(out, in, loops));
    } else {
        report(who, loops, ping(out, in, loops));
        pong(out, in, loops);
    }

    SCIDisconnectInterrupt(out, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIDisconnectInterrupt");
    SCIRemoveInterrupt(in, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIRemoveInterrupt");
    close_descriptor(sd);                              /* SCIClose, SCITerminate */
    printf("%s: success\n", who);
    return 0;
}
