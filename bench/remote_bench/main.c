/*
 * remote_bench - vsci between two nodes: what a SISCI program sees when
 * its peer runs on another host.
 *
 * One program, run as two processes on two different nodes of a cluster
 * (VSCI_SOCKET names each one's node): `-server -rn CLIENT_NODE` on one,
 * `-client -rn SERVER_NODE` on the other.  `vsci bench --paths remote`
 * starts both, each in its own network namespace, and puts the results next
 * to peers (sockperf, iperf3) measured on the same namespaces in the same
 * run.  Only the SISCI API is used, also to coordinate the two processes:
 * each creates an "inbox" segment, maps the other's, and control messages
 * are a value plus a sequence word written into the peer's inbox followed
 * by SCIFlush.  The client drives; the server obeys commands.  Sections:
 *
 *   a) remote ping-pong latency, 4 B .. 8 KiB: the client writes the message
 *      (payload, then a sequence flag in its last 4 bytes) into the server's
 *      inbox through its remote map with plain stores and NO SISCI call, and
 *      busy-waits on its own local inbox for the echo.  RTT/2, median/p99;
 *   b) remote write bandwidth, 64 KiB .. 8 MiB, into an 8 MiB segment of the
 *      server: memcpy() into the remote map + SCIFlush per copy (thesis
 *      style), and SCIMemCpy() per copy.  MB/s;
 *   c) store-to-visibility delay: the server stores a CLOCK_MONOTONIC time
 *      stamp into the client's inbox (no call) at a steady pace, the client
 *      polls its local inbox and records arrival time - store time (both
 *      nodes share the host's clock); p50/p99/max, at two paces;
 *   d) remote interrupt (SCITriggerInterrupt / SCIWaitForInterrupt) and data
 *      interrupt (4 B, 1 KiB) ping-pong latency, RTT/2;
 *   e) spinning ping-pong, a 4-byte counter, with maps of 4 KiB, 16 MiB and
 *      1 GiB: each side stores the counter into the last 4 bytes of the
 *      peer's segment (plain store, no call) and spins on its own segment in
 *      a plain loop (no pause, no yield).  RTT/2 per map size;
 *   f) store + SCIFlush: 1 B, and a 4 KiB memcpy of new data, into the
 *      server's segment, then SCIFlush(NULL, 0); time per store + flush;
 *   g) an idle 1 GiB map: one byte stored and flushed, then 10 s of sleep:
 *      the client's CPU and the bytes on its namespace's links during the
 *      sleep, against the same sleep with no such map (the nodes' heartbeats);
 *   h) mailbox: payload word (the same value two rounds running), SCIFlush,
 *      flag (always the same value), SCIFlush, spin for the ack; the server
 *      checks the payload and clears both in its own memory before it acks.
 *      Rounds per second, wrong payloads;
 *   i) message ring, what a message-passing layer over SISCI does (issue 35):
 *      a ring of 16 slots in each side's segment; per message the sender
 *      memcpy's the payload (new data every message) into the receiver's
 *      slot through its remote map, stores a header (length, sequence) above
 *      it, then a flag word above that; the receiver spins on the flag in
 *      its own segment, checks every payload byte and stores its consumed
 *      counter (the ack) into the sender's segment through its own remote
 *      map; the sender spins on acks when the ring is full.  Plain loops, no
 *      call, and a variant with SCIFlush after the flag.  8 B .. 8 KiB;
 *      ping-pong (one-way latency) and streaming (messages per second), with
 *      the bytes that crossed the link per message;
 *   j) per trapped store: isolated 8-byte stores into clean pages of a
 *      remote map, one per millisecond: CPU of the storing thread and of the
 *      process per store, time in the store, and delay until the owner sees
 *      it, beside one RMA write (SCIMemCpy of the same 8 bytes) timed alike.
 *
 * Usage: remote_bench -server|-client -rn NODE [-quick] [-json FILE] [-s abcdefghij]
 *                     [-id SEGID] [-timeout S] [-yield N] [-h]
 * See bench/README.md ("remote_bench").
 *
 * This file: the options, the client's order of sections and the server's
 * command loop; remote_bench.h lists the other files and what each holds.
 */

#define REMOTE_BENCH_MAIN
#include "remote_bench.h"

struct remote_results R;
struct remote_options opt;

/* ------------------------------------------------------------------------ */
/* The server: a command loop                                               */
/* ------------------------------------------------------------------------ */

static void run_server(void)
{
    setup();
    uint64_t hello = ctl_recv();
    if (hello >> 56 != CMD_HELLO || ((hello >> 8) & 0xffffffu) != HELLO_MAGIC)
        fail("the first control message is not the client's hello (0x%llx)",
             (unsigned long long)hello);
    ctl_send(CMD(CMD_HELLO, (uint64_t)HELLO_MAGIC << 8));
    printf("remote_bench server: node %u, serving node %u (%s mode)\n", g_node, opt.rn,
           (hello & 1) ? "quick" : "default");
    fflush(stdout);
    for (;;) {
        uint64_t c = ctl_recv();
        uint64_t arg = c & ((1ull << 56) - 1);
        switch ((int)(c >> 56)) {
        case CMD_PP:
            g_phase = PH_PP;
            server_pp((size_t)arg);
            break;
        case CMD_BW_CHECK:
            g_phase = PH_BW;
            server_bw_check();
            break;
        case CMD_VIS:
            g_phase = PH_VIS;
            server_vis((unsigned)arg);
            break;
        case CMD_INTR_SETUP:
            g_phase = PH_INTR;
            intr_setup();
            break;
        case CMD_INTR_LOOP:
            server_intr_loop(arg);
            break;
        case CMD_INTR_END:
            intr_end();
            break;
        case CMD_SPIN_SETUP:
            g_phase = PH_SPIN;
            if (arg >= SPIN_SIZES)
                fail("spinning ping-pong command with a bad size index %llu",
                     (unsigned long long)arg);
            g_spin_seq = 0;
            xseg_open(&g_x, opt.segid + SPIN_SEGID + 2u * (uint32_t)arg, spin_sizes[arg]);
            break;
        case CMD_SPIN_LOOP:
            ctl_send(spin_loop(&g_x, (uint32_t)arg, NULL));
            break;
        case CMD_SPIN_END:
            xseg_close(&g_x);
            break;
        case CMD_FLUSH_CHECK:
            g_phase = PH_FLUSH;
            server_flush_check((size_t)arg);
            break;
        case CMD_IDLE_SETUP:
        case CMD_IDLE_CHECK:
        case CMD_IDLE_END:
            g_phase = PH_IDLE;
            server_idle((int)(c >> 56), arg);
            break;
        case CMD_MBOX:
            g_phase = PH_MBOX;
            ctl_send(mb_loop((uint32_t)arg, NULL, NULL));
            break;
        case CMD_RING_SETUP:
        case CMD_RING_PP:
        case CMD_RING_STREAM:
        case CMD_RING_END:
            server_ring((int)(c >> 56), arg);
            break;
        case CMD_TS_SETUP:
        case CMD_TS_RUN:
        case CMD_TS_END:
            server_ts((int)(c >> 56), arg);
            break;
        case CMD_DONE:
            teardown();
            printf("remote_bench server: done\n");
            return;
        default:
            fail("unknown command 0x%llx", (unsigned long long)c);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* main                                                                     */
/* ------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: remote_bench -server -rn CLIENT_NODE [options]   (on one node)\n"
        "       remote_bench -client -rn SERVER_NODE [options]   (on another node)\n"
        "  -quick        few iterations and a subset of sizes (a few seconds)\n"
        "  -json FILE    client: also write the results as JSON to FILE\n"
        "  -s SECTIONS   client: run only these sections (default abcdefghij): a ping-pong,\n"
        "                b write bandwidth, c store-to-visibility, d interrupts,\n"
        "                e spinning ping-pong (no yields) by map size, f store + SCIFlush,\n"
        "                g idle 1 GiB map, h mailbox, i message ring, j per trapped store\n"
        "  -id SEGID     segment id base (default 0x%x; the server uses SEGID and\n"
        "                SEGID+2, the client SEGID+1; e, g, i, j use SEGID+0x10..0x40)\n"
        "  -timeout S    longest wait for the other side (default 60 s)\n"
        "  -yield N      sched_yield() after every N busy-wait spins (default 64; 0 = never;\n"
        "                sections e, h, i and j spin in plain loops whatever it says)\n"
        "  -same-node    the other side is on this node too (a guest of it, or a host\n"
        "                process next to a guest): -rn may name this node\n"
        "  -bw-from B    bandwidth from B bytes (power of two >= 4; default 65536)\n"
        "Each side's VSCI_SOCKET names its node; the nodes are in one cluster.\n",
        DEFAULT_SEGID);
}

static void setup_options(void)
{
    opt.n_pp = opt.n_bw = opt.n_ring = 0;
    if (opt.quick) {
        static const size_t p[] = { 4, 64, 1024, 8192 };
        for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
            opt.pp_sizes[opt.n_pp++] = p[i];
        /* -bw-from below 64 KiB adds it (and 4 KiB) in front. */
        if (opt.bw_from < (64u << 10))
            opt.bw_sizes[opt.n_bw++] = opt.bw_from;
        if (opt.bw_from < 4096)
            opt.bw_sizes[opt.n_bw++] = 4096;
        static const size_t b[] = { 64u << 10, 1u << 20, 8u << 20 };
        for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
            opt.bw_sizes[opt.n_bw++] = b[i];
        opt.pp_warm = 50;  opt.pp_min = 200; opt.pp_max = 2000; opt.pp_budget = 0.15;
        opt.bw_time = 0.1; opt.bw_rounds = 1;
        opt.vis_interval_us[0] = 100;   opt.vis_count[0] = 1000;
        opt.vis_interval_us[1] = 10000; opt.vis_count[1] = 30;
        opt.in_warm = 20;  opt.in_min = 100; opt.in_max = 1000; opt.in_budget = 0.1;
        opt.idle_secs = 5;
        opt.mb_warm = 20;  opt.mb_min = 100; opt.mb_max = 1000; opt.mb_budget = 0.2;
        static const size_t r[] = { 8, 1024, 8192 };
        for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
            opt.ring_sizes[opt.n_ring++] = r[i];
        opt.ring_warm = 20; opt.ring_min = 100; opt.ring_max = 1000; opt.ring_budget = 0.1;
        opt.ts_count = 200;
    } else {
        for (size_t s = 4; s <= PP_MAX; s *= 2)
            opt.pp_sizes[opt.n_pp++] = s;
        /* Below 64 KiB (only with -bw-from) in steps of 4, so that
         * 4 B .. 8 MiB fits MAX_BW_SIZES; from 64 KiB in steps of 2. */
        for (size_t s = opt.bw_from; s < (64u << 10); s *= 4)
            opt.bw_sizes[opt.n_bw++] = s;
        for (size_t s = 64u << 10; s <= BW_MAX; s *= 2)
            opt.bw_sizes[opt.n_bw++] = s;
        opt.pp_warm = 300; opt.pp_min = 1000; opt.pp_max = 20000; opt.pp_budget = 0.6;
        opt.bw_time = 0.3; opt.bw_rounds = 2;
        opt.vis_interval_us[0] = 100;   opt.vis_count[0] = 2000;
        opt.vis_interval_us[1] = 10000; opt.vis_count[1] = 200;
        opt.in_warm = 100; opt.in_min = 500; opt.in_max = 10000; opt.in_budget = 0.8;
        opt.idle_secs = 10;
        opt.mb_warm = 200; opt.mb_min = 1000; opt.mb_max = 50000; opt.mb_budget = 2.0;
        for (int i = 0; i < RING_SIZES; i++)
            opt.ring_sizes[opt.n_ring++] = ring_sizes[i];
        opt.ring_warm = 100; opt.ring_min = 500; opt.ring_max = 20000; opt.ring_budget = 0.5;
        opt.ts_count = 1000;
    }
}

/* The client's sections, in the order of their letters in ALL_SECTIONS. */
static void (*const sections[])(void) = {
    section_pp, section_bw, section_vis, section_intr, section_spin,
    section_flush, section_idle, section_mbox, section_ring, section_ts
};

int main(int argc, char **argv)
{
    int role = -1, have_rn = 0;
    snprintf(opt.sections, sizeof opt.sections, ALL_SECTIONS);
    opt.segid = DEFAULT_SEGID;
    opt.timeout = 60;
    opt.yield_every = 64;
    opt.bw_from = 64u << 10;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] == '-' && a[1] == '-')
            a++;                                /* accept --quick too */
        if (!strcmp(a, "-server")) {
            role = 1;
        } else if (!strcmp(a, "-client")) {
            role = 0;
        } else if (!strcmp(a, "-rn") && i + 1 < argc) {
            opt.rn = (unsigned)strtoul(argv[++i], NULL, 0);
            have_rn = 1;
        } else if (!strcmp(a, "-quick")) {
            opt.quick = 1;
        } else if (!strcmp(a, "-json") && i + 1 < argc) {
            opt.json = argv[++i];
        } else if (!strcmp(a, "-s") && i + 1 < argc) {
            const char *s = argv[++i];
            if (!parse_sections_of(s, ALL_SECTIONS, opt.sections, sizeof opt.sections)) {
                usage(stderr);
                return 2;
            }
        } else if (!strcmp(a, "-id") && i + 1 < argc) {
            opt.segid = (uint32_t)strtoul(argv[++i], NULL, 0);
        } else if (!strcmp(a, "-timeout") && i + 1 < argc) {
            opt.timeout = atof(argv[++i]);
        } else if (!strcmp(a, "-same-node")) {
            opt.same_node = 1;
        } else if (!strcmp(a, "-bw-from") && i + 1 < argc) {
            opt.bw_from = (size_t)strtoul(argv[++i], NULL, 0);
            if (opt.bw_from < 4 || opt.bw_from > (64u << 10) || (opt.bw_from & (opt.bw_from - 1))) {
                fprintf(stderr, "remote_bench: -bw-from wants a power of two from 4 to 65536\n");
                return 2;
            }
        } else if (!strcmp(a, "-yield") && i + 1 < argc) {
            opt.yield_every = (unsigned)strtoul(argv[++i], NULL, 0);
        } else {
            return help_or_unknown("remote_bench", a, argv[i], usage);
        }
    }
    if (role < 0 || !have_rn || opt.timeout <= 0) {
        fprintf(stderr, "remote_bench: say -server or -client, and -rn NODE\n");
        usage(stderr);
        return 2;
    }
    opt.server = role;
    setup_options();
    machine_info(argc, argv);

    g_pat[0] = xalloc(PP_MAX);
    g_pat[1] = xalloc(PP_MAX);
    g_rbuf = xalloc(PP_MAX);
    memset(g_pat[0], 0x5a, PP_MAX);
    memset(g_pat[1], 0xa5, PP_MAX);

    if (opt.server) {
        run_server();
        return 0;
    }

    print_header();
    uint64_t t0 = now_ns();
    setup();
    for (size_t s = 0; s < sizeof sections / sizeof sections[0]; s++)
        if (want(ALL_SECTIONS[s]))
            sections[s]();
    teardown();
    g_elapsed = (double)(now_ns() - t0) / 1e9;

    print_results();
    /* As in sisci_bench, wrong payloads are counted and shown (!!), and
     * the exit status says whether every phase ran. */
    int ok = 1, wrong = 0;
    for (int i = 0; i < R.pp_n; i++)
        wrong |= R.pp[i].bad != 0;
    for (int d = 0; d < 2; d++)
        wrong |= R.dint[d].bad != 0;
    for (int k = 0; k < R.spin_n; k++)
        wrong |= R.spin[k].bad != 0;
    for (int d = 0; d < R.fl_n; d++)
        wrong |= R.fl_check[d] < 0;
    wrong |= R.idle_ran && R.idle_check < 0;
    wrong |= R.mb_ran && (R.mb_wrong || R.mb_ack_wrong);
    for (int i = 0; i < R.ring_n; i++)
        wrong |= R.ring[i].pp_wrong || R.ring[i].st_wrong;
    wrong |= R.ts[TS_STORE].lost || R.ts[TS_MEMCPY].lost;
    printf("\ntotal time %.1f s%s\n", g_elapsed, wrong ? "   (!! WRONG PAYLOADS, see above)" : "");
    return json_and_status(ok, opt.json, write_json);
}
