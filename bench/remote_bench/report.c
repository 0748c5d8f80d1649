#include "remote_bench.h"

/* ------------------------------------------------------------------------ */
/* Output (client)                                                          */
/* ------------------------------------------------------------------------ */

double g_elapsed;

static const char *wait_mode(void)
{
    const char *w = getenv("VSCI_WAIT");
    return w && *w ? w : "node default";
}

void print_header(void)
{
    print_machine("remote_bench");
    printf("run     : %s  (mode %s; sections %s; VSCI_WAIT %s; busy-waits yield every %u spins)\n",
           g_cmd, opt.quick ? "quick" : "default", opt.sections, wait_mode(), opt.yield_every);
    printf("method  : this client drives a remote_bench -server on node %u; both coordinate\n"
           "          through their own SISCI inbox segments only.  Times from\n"
           "          clock_gettime(CLOCK_MONOTONIC).  Latencies in microseconds; MB/s = 10^6 B/s.\n",
           opt.rn);
    fflush(stdout);
}

static void lat_cells(const lat_t *L)
{
    if (L->n)
        printf(" %9.2f %9.2f %9.2f %9.2f", L->med, L->p99, L->mean, L->max);
    else
        printf(" %9s %9s %9s %9s", "-", "-", "-", "-");
}

/* A row of [a] or [e]: size, latencies, samples, and what went wrong. */
static void lat_row(size_t size, const lat_t *L, const char *bad_what)
{
    char b1[32];
    printf("  %9s", fmt_size(size, b1, sizeof b1));
    lat_cells(L);
    printf(" %8u", L->n);
    if (L->late)
        printf("   %u flag before payload", L->late);
    if (L->bad)
        printf("   !! %u %s", L->bad, bad_what);
    printf("\n");
}

void print_results(void)
{
    char b1[32];
    printf("node id : %u (client), %u (server)\n", g_node, opt.rn);
    if (want('a') && R.ran[PH_PP]) {
        printf("\n[a] remote ping-pong: the client writes a message (payload, then the sequence\n"
               "    number in its last 4 bytes) into the server's inbox through its remote map,\n"
               "    with no SISCI call, and busy-waits on its own local inbox for the echo.\n"
               "    Every payload byte changes each message.  RTT/2 in microseconds.\n"
               "    \"flag before payload\": the flag was seen before all of the payload had\n"
               "    arrived (it completed later).  Stores between two flush points may arrive\n"
               "    in any order, except that the highest changed word of each shipment (here\n"
               "    the flag, stored last and above its payload) is placed after the rest of\n"
               "    it (docs/cluster.md): a flag never shows before its payload, so this count\n"
               "    should stay 0 and anything else is a bug.  \"wrong\": not complete after\n"
               "    0.5 s.\n");
        printf("  %9s %9s %9s %9s %9s %8s\n", "size", "median", "p99", "mean", "max", "n");
        for (int i = 0; i < R.pp_n; i++)
            lat_row(R.pp_size[i], &R.pp[i], "wrong payloads");
    }
    if (want('b') && R.ran[PH_BW]) {
        printf("\n[b] remote write bandwidth into an 8 MiB segment of the server, best of %d\n"
               "    runs of >= %.0f ms: memcpy() into the remote map + SCIFlush per copy, and\n"
               "    SCIMemCpy per copy.  Copies alternate between two sources that differ in\n"
               "    every byte.\n", opt.bw_rounds, opt.bw_time * 1e3);
        printf("  %9s %16s %16s\n", "size", "memcpy+SCIFlush", "SCIMemCpy");
        for (int i = 0; i < R.bw_n; i++)
            printf("  %9s %11.1f MB/s %11.1f MB/s\n", fmt_size(R.bw_size[i], b1, sizeof b1),
                   R.bw_flush[i], R.bw_memcpy[i]);
        if (R.bw_verified)
            printf("  data check: %s\n", R.bw_verified > 0
                   ? "8 MiB written through the map, read back identical by the server"
                   : "!! MISMATCH between what was written and what the server holds");
    }
    if (want('c') && R.ran[PH_VIS]) {
        printf("\n[c] store-to-visibility: the server stores a CLOCK_MONOTONIC time stamp into\n"
               "    the client's inbox (plain stores, no call); the client polls its local\n"
               "    inbox and records arrival - store time.  One way, microseconds.\n");
        printf("  %9s %9s %7s %7s %9s %9s %9s %9s %7s\n", "pace(us)", "actual", "sent", "seen",
               "p50", "p99", "mean", "max", "lost");
        for (int p = 0; p < R.vis_n; p++) {
            const lat_t *L = &R.vis[p];
            printf("  %9u %9.1f %7u %7u", R.vis_interval_us[p], R.vis_actual_us[p],
                   R.vis_sent[p], L->n);
            if (L->n)
                printf(" %9.2f %9.2f %9.2f %9.2f", L->med, L->p99, L->mean, L->max);
            else
                printf(" %9s %9s %9s %9s", "-", "-", "-", "-");
            printf(" %7u\n", L->bad);
        }
        printf("  (lost = overwritten in the %u-slot ring before the client saw it)\n", VIS_SLOTS);
    }
    if (want('d') && R.ran[PH_INTR]) {
        printf("\n[d] remote interrupts: SCITriggerInterrupt -> SCIWaitForInterrupt ping-pong\n"
               "    between the nodes, and the same with data interrupts.  RTT/2, microseconds.\n");
        printf("  %-22s %9s %9s %9s %9s %8s\n", "kind", "median", "p99", "mean", "max", "n");
        printf("  %-22s", "interrupt");
        lat_cells(&R.intr);
        printf(" %8u\n", R.intr.n);
        for (int d = 0; d < 2; d++) {
            char k[32];
            snprintf(k, sizeof k, "data interrupt %u B", di_sizes[d]);
            printf("  %-22s", k);
            lat_cells(&R.dint[d]);
            printf(" %8u", R.dint[d].n);
            if (R.dint[d].bad)
                printf("   !! %u wrong payloads", R.dint[d].bad);
            printf("\n");
        }
    }
    if (want('e') && R.ran[PH_SPIN]) {
        printf("\n[e] spinning ping-pong, no yields: each side has a segment of the map size\n"
               "    and maps the other's whole segment; a 4-byte counter is stored into the\n"
               "    last 4 bytes of the peer's segment (plain store, no SISCI call) and each\n"
               "    side spins on its own segment in a plain loop (no pause, no sched_yield).\n"
               "    RTT/2 in microseconds.  \"wrong\": a value that was neither the previous\n"
               "    counter nor the expected one.\n");
        printf("  %9s %9s %9s %9s %9s %8s\n", "map", "median", "p99", "mean", "max", "n");
        for (int k = 0; k < R.spin_n; k++)
            lat_row(R.spin_size[k], &R.spin[k], "wrong values");
    }
    if (want('f') && R.ran[PH_FLUSH]) {
        printf("\n[f] store + SCIFlush: 1 B (a new value each time), or a memcpy of 4 KiB of new\n"
               "    data, into the server's segment through the remote map, then\n"
               "    SCIFlush(NULL, 0).  Microseconds per store + flush (not halved).\n");
        printf("  %9s %9s %9s %9s %9s %8s  %s\n", "size", "median", "p99", "mean", "max", "n",
               "check");
        for (int d = 0; d < R.fl_n; d++) {
            printf("  %9s", fmt_size(fl_sizes[d], b1, sizeof b1));
            lat_cells(&R.fl[d]);
            printf(" %8u  %s\n", R.fl[d].n, R.fl_check[d] > 0
                   ? "the server holds the last store"
                   : "!! the server does NOT hold the last store");
        }
    }
    if (want('g') && R.ran[PH_IDLE] && R.idle_ran) {
        printf("\n[g] idle map: the client maps the server's 1 GiB segment, stores one byte,\n"
               "    SCIFlush, then sleeps %.0f s.  CPU of the client process during the sleep\n"
               "    (getrusage, user + system) and bytes on its namespace's non-loopback\n"
               "    links (/proc/net/dev, received + sent), against the same sleep with no\n"
               "    such map (the nodes' heartbeats).\n", R.idle_secs);
        printf("  %-22s %8s %10s %8s %12s %12s %10s\n", "", "sleep s", "CPU ms", "CPU %",
               "rx bytes", "tx bytes", "B/s");
        static const char *const names[2] = { "no map (heartbeats)", "1 GiB map" };
        for (int i = 0; i < 2; i++) {
            const idle_t *m = &R.idle[i];
            printf("  %-22s %8.2f %10.2f %8.3f", names[i], m->wall_s, m->cpu_s * 1e3,
                   m->wall_s > 0 ? 100.0 * m->cpu_s / m->wall_s : 0.0);
            if (m->ok)
                printf(" %12llu %12llu %10.1f\n", (unsigned long long)m->rx,
                       (unsigned long long)m->tx,
                       m->wall_s > 0 ? (double)(m->rx + m->tx) / m->wall_s : 0.0);
            else
                printf(" %12s %12s %10s\n", "-", "-", "-");
        }
        printf("  data check: %s\n", R.idle_check > 0
               ? "the server holds the byte stored before the sleep"
               : "!! the server does NOT hold the byte stored before the sleep");
    }
    if (want('h') && R.ran[PH_MBOX] && R.mb_ran) {
        printf("\n[h] mailbox: payload word (the same value two rounds running), SCIFlush, flag\n"
               "    (always 1), SCIFlush into the server's segment, then a plain spin on the own\n"
               "    segment for the ack; the server spins on the flag, checks the payload,\n"
               "    clears flag and payload in its own memory and acks through its map.\n");
        printf("  rounds %u timed (%u in all) in %.3f s: %.0f rounds/s, %.2f us per round;\n"
               "  per round median %.2f us, p99 %.2f us, max %.2f us\n",
               R.mb.n, R.mb_rounds_total, R.mb_elapsed_s,
               R.mb_elapsed_s > 0 ? R.mb.n / R.mb_elapsed_s : 0.0,
               R.mb.n ? R.mb_elapsed_s * 1e6 / R.mb.n : 0.0, R.mb.med, R.mb.p99, R.mb.max);
        printf("  wrong payloads: %u%s", R.mb_wrong, R.mb_wrong ? "   !! (must be 0)" : "");
        if (R.mb_ack_wrong)
            printf("   !! %u acks with an unexpected value", R.mb_ack_wrong);
        printf("\n");
    }
    if (want('i') && R.ran[PH_RING] && R.ring_n) {
        printf("\n[i] message ring (%u slots): per message a memcpy of new data into the\n"
               "    receiver's slot through the remote map, a header {length, sequence} above\n"
               "    it, then a flag above that; the receiver spins on the flag in its own\n"
               "    segment, checks every byte and stores its consumed counter into the\n"
               "    sender's segment through its map.  Plain spin loops, no call (or SCIFlush\n"
               "    after the flag).  Ping-pong: one way = RTT/2, us.  Streaming: messages\n"
               "    per second from the first send to the ack of the last.  Link: bytes on\n"
               "    the namespace's links (both ways) per message.\n", RING_SLOTS);
        printf("  %-9s %7s %9s %9s %8s %10s %9s %10s %9s\n", "variant", "size", "median",
               "p99", "n", "B/msg pp", "msg/s", "MB/s", "B/msg st");
        for (int i = 0; i < R.ring_n; i++) {
            const ring_row_t *r = &R.ring[i];
            double rate = r->st_secs > 0 ? (r->st_msgs - r->st_wrong) / r->st_secs : 0.0;
            printf("  %-9s %7s %9.2f %9.2f %8u", r->flush ? "SCIFlush" : "no call",
                   fmt_size(r->size, b1, sizeof b1), r->pp.med, r->pp.p99, r->pp.n);
            if (r->link_ok)
                printf(" %10.0f", r->pp_msgs ? (double)r->pp_link / r->pp_msgs : 0.0);
            else
                printf(" %10s", "-");
            printf(" %9.0f %10.2f", rate, rate * r->size / 1e6);
            if (r->link_ok)
                printf(" %9.0f", r->st_msgs ? (double)r->st_link / r->st_msgs : 0.0);
            else
                printf(" %9s", "-");
            if (r->pp_late || r->st_late)
                printf("   %u flag before payload", r->pp_late + r->st_late);
            if (r->pp_wrong || r->st_wrong)
                printf("   !! %u wrong messages", r->pp_wrong + r->st_wrong);
            printf("\n");
        }
    }
    if (want('j') && R.ran[PH_TS] && R.ts[TS_STORE].ran) {
        static const char *const what[3] = { "store 8 B", "SCIMemCpy 8 B", "local store" };
        printf("\n[j] per trapped store: %u isolated 8-byte writes, one every %u us, each into a\n"
               "    page not written since its last shipment.  CPU of the writing thread\n"
               "    (CLOCK_THREAD_CPUTIME_ID) and of the whole process (getrusage) per write,\n"
               "    time in the write, and the delay until the owner (spinning on its own\n"
               "    segment) sees the value.  \"local store\": the same into private memory.\n",
               R.ts_count, TS_PACE_US);
        printf("  %-14s %16s %12s %16s %20s %6s\n", "what", "thread CPU med/mean", "proc CPU",
               "in write med/p99", "to owner med/p99", "lost");
        for (int k = 0; k < 3; k++) {
            const ts_row_t *t = &R.ts[k];
            if (!t->ran)
                continue;
            printf("  %-14s %8.2f/%7.2f %12.2f %8.2f/%7.2f", what[k], t->cpu.med, t->cpu.mean,
                   t->proc_cpu_us, t->wall.med, t->wall.p99);
            if (k != TS_LOCAL)
                printf(" %10.2f/%9.2f %6u", t->vis.med, t->vis.p99, t->lost);
            printf("\n");
        }
    }
}

int write_json(const char *path)
{
    FILE *f = json_open("remote_bench", path);
    if (!f)
        return 0;
    json_preamble(f, "remote_bench", opt.quick, 0, 0);
    fprintf(f, ",\n  \"node_id\": %u,\n  \"server_node_id\": %u,\n  \"vsci_wait\": ", g_node,
            opt.rn);
    json_str(f, wait_mode());
    fprintf(f, ",\n  \"yield_every\": %u,\n  \"elapsed_s\": ", opt.yield_every);
    json_num(f, g_elapsed);
    fputs(",\n  \"units\": {\"bandwidth\": \"MB/s (1e6 B/s)\", \"latency\": "
          "\"microseconds; RTT/2 for ping-pongs, one way for store_visibility\"},\n", f);

    fputs("  \"phases\": [", f);
    int first = 1;
    for (int p = 0; p < NPHASES; p++) {
        if (!R.ran[p])
            continue;
        fprintf(f, "%s\n    {\"name\": ", first ? "" : ",");
        first = 0;
        json_str(f, phase_names[p]);
        fprintf(f, ", \"ok\": %s, \"errors\": [", R.ok[p] ? "true" : "false");
        if (R.err[p][0])
            json_str(f, R.err[p]);
        fputs("]}", f);
    }
    fputs("\n  ],\n", f);

    fputs("  \"pingpong\": {\"vsci\": \"message + flag stored into the peer's segment through "
          "a remote map, no SISCI call; busy-wait on the own local segment\", \"rows\": [", f);
    for (int i = 0; i < R.pp_n; i++) {
        fprintf(f, "%s\n    {\"size\": %zu, \"flag_before_payload\": %u, \"vsci\": ",
                i ? "," : "", R.pp_size[i], R.pp[i].late);
        json_lat(f, &R.pp[i]);
        fputs("}", f);
    }
    fputs("\n  ]},\n", f);

    fprintf(f, "  \"write_bandwidth\": {\"flush\": \"memcpy into remote map + SCIFlush per "
               "copy\", \"memcpy\": \"SCIMemCpy per copy\", \"data_check\": %s, \"rows\": [",
            R.bw_verified > 0 ? "\"ok\"" : R.bw_verified < 0 ? "\"mismatch\"" : "null");
    for (int i = 0; i < R.bw_n; i++) {
        fprintf(f, "%s\n    {\"size\": %zu, \"flush_MBps\": ", i ? "," : "", R.bw_size[i]);
        json_num(f, R.bw_flush[i]);
        fputs(", \"memcpy_MBps\": ", f);
        json_num(f, R.bw_memcpy[i]);
        fputs("}", f);
    }
    fputs("\n  ]},\n", f);

    fputs("  \"store_visibility\": {\"vsci\": \"time stamp stored into a remote map with no "
          "call; arrival seen by polling the owner's local map\", \"rows\": [", f);
    for (int p = 0; p < R.vis_n; p++) {
        fprintf(f, "%s\n    {\"interval_us\": %u, \"actual_interval_us\": ", p ? "," : "",
                R.vis_interval_us[p]);
        json_num(f, R.vis_actual_us[p]);
        fprintf(f, ", \"sent\": %u, \"lost\": %u, \"delay\": ", R.vis_sent[p], R.vis[p].bad);
        json_lat(f, &R.vis[p]);
        fputs("}", f);
    }
    fputs("\n  ]},\n", f);

    fputs("  \"interrupt\": {\"vsci\": ", f);
    json_lat(f, &R.intr);
    fputs("},\n  \"data_interrupt\": {\"rows\": [", f);
    for (int d = 0; d < 2; d++) {
        fprintf(f, "%s\n    {\"payload\": %u, \"vsci\": ", d ? "," : "", di_sizes[d]);
        json_lat(f, &R.dint[d]);
        fputs("}", f);
    }
    fputs("\n  ]},\n", f);

    fputs("  \"spin_pingpong\": {\"vsci\": \"4-byte counter stored into the last 4 bytes of the "
          "peer's segment (map of its whole segment), no SISCI call; plain spin on the own "
          "segment, no pause, no yield; RTT/2; bad = values neither old nor new\", \"rows\": [", f);
    for (int k = 0; k < R.spin_n; k++) {
        fprintf(f, "%s\n    {\"map_size\": %zu, \"vsci\": ", k ? "," : "", R.spin_size[k]);
        json_lat(f, &R.spin[k]);
        fputs("}", f);
    }
    fputs("\n  ]},\n", f);

    fputs("  \"store_flush\": {\"vsci\": \"1 B store (new value) or memcpy of 4 KiB of new data "
          "into the server's segment through the remote map, then SCIFlush(NULL, 0); time per "
          "store + flush, not halved\", \"rows\": [", f);
    for (int d = 0; d < R.fl_n; d++) {
        fprintf(f, "%s\n    {\"size\": %zu, \"data_check\": \"%s\", \"vsci\": ", d ? "," : "",
                fl_sizes[d], R.fl_check[d] > 0 ? "ok" : "mismatch");
        json_lat(f, &R.fl[d]);
        fputs("}", f);
    }
    fputs("\n  ]},\n", f);

    fputs("  \"idle_map\": ", f);
    if (R.idle_ran) {
        fprintf(f, "{\"vsci\": \"map of the server's 1 GiB segment, one byte stored + SCIFlush, "
                   "then a sleep: CPU of the client process (getrusage RUSAGE_SELF) and bytes on "
                   "its namespace's non-loopback links (/proc/net/dev) during the sleep; no_map: "
                   "the same sleep without that map (the nodes' heartbeats)\", \"map_size\": "
                   "%llu, \"seconds\": ", (unsigned long long)IDLE_SIZE);
        json_num(f, R.idle_secs);
        fprintf(f, ", \"data_check\": \"%s\"", R.idle_check > 0 ? "ok" : "mismatch");
        static const char *const keys[2] = { "no_map", "map" };
        for (int i = 0; i < 2; i++) {
            const idle_t *m = &R.idle[i];
            fprintf(f, ", \"%s\": {\"wall_s\": ", keys[i]);
            json_num(f, m->wall_s);
            fputs(", \"cpu_s\": ", f);
            json_num(f, m->cpu_s);
            fputs(", \"cpu_pct\": ", f);
            json_num(f, m->wall_s > 0 ? 100.0 * m->cpu_s / m->wall_s : NAN);
            if (m->ok)
                fprintf(f, ", \"rx_bytes\": %llu, \"tx_bytes\": %llu, \"link_bytes\": %llu}",
                        (unsigned long long)m->rx, (unsigned long long)m->tx,
                        (unsigned long long)(m->rx + m->tx));
            else
                fputs(", \"rx_bytes\": null, \"tx_bytes\": null, \"link_bytes\": null}", f);
        }
        fputs("},\n", f);
    } else {
        fputs("null,\n", f);
    }

    fputs("  \"message_ring\": ", f);
    if (R.ring_n) {
        fprintf(f, "{\"vsci\": \"ring of %u slots in each side's segment; per message a memcpy "
                   "of new data into the receiver's slot through the remote map, a header "
                   "{length, sequence} above it, then a flag word above that (plus SCIFlush "
                   "when flush is true); the receiver spins on the flag in its own segment, "
                   "checks every byte and stores its consumed counter into the sender's segment "
                   "through its own map (never flushed); plain spin loops\", \"slots\": %u, "
                   "\"slot_stride\": %u, \"link\": \"bytes received + sent on the client "
                   "namespace's non-loopback links (/proc/net/dev) during the timed loop, per "
                   "message (ping-pong: 2 messages per round trip; streaming: the messages sent, "
                   "acks are overhead)\", \"rows\": [", RING_SLOTS, RING_SLOTS, RING_STRIDE);
        for (int i = 0; i < R.ring_n; i++) {
            const ring_row_t *r = &R.ring[i];
            fprintf(f, "%s\n    {\"size\": %zu, \"flush\": %s, \"pingpong\": ", i ? "," : "",
                    r->size, r->flush ? "true" : "false");
            json_lat(f, &r->pp);
            fprintf(f, ", \"pp_messages\": %llu, \"pp_late\": %u, \"pp_wrong\": %u, "
                       "\"pp_link_bytes\": ", (unsigned long long)r->pp_msgs, r->pp_late,
                    r->pp_wrong);
            if (r->link_ok)
                fprintf(f, "%llu, \"pp_link_bytes_per_msg\": ", (unsigned long long)r->pp_link);
            else
                fputs("null, \"pp_link_bytes_per_msg\": ", f);
            json_num(f, r->link_ok && r->pp_msgs ? (double)r->pp_link / r->pp_msgs : NAN);
            fprintf(f, ", \"stream_messages\": %llu, \"stream_seconds\": ",
                    (unsigned long long)r->st_msgs);
            json_num(f, r->st_secs);
            fputs(", \"msgs_per_s\": ", f);
            /* only messages that arrived right count */
            double rate = r->st_secs > 0 ? (r->st_msgs - r->st_wrong) / r->st_secs : NAN;
            json_num(f, rate);
            fputs(", \"MBps\": ", f);
            json_num(f, rate * r->size / 1e6);
            fprintf(f, ", \"stream_late\": %u, \"stream_wrong\": %u, \"stream_link_bytes\": ",
                    r->st_late, r->st_wrong);
            if (r->link_ok)
                fprintf(f, "%llu, \"stream_link_bytes_per_msg\": ", (unsigned long long)r->st_link);
            else
                fputs("null, \"stream_link_bytes_per_msg\": ", f);
            json_num(f, r->link_ok && r->st_msgs ? (double)r->st_link / r->st_msgs : NAN);
            fputs("}", f);
        }
        fputs("\n  ]},\n", f);
    } else {
        fputs("null,\n", f);
    }

    fputs("  \"trapped_store\": ", f);
    if (R.ts[TS_STORE].ran) {
        static const char *const keys[3] = { "store", "scimemcpy", "local_store" };
        fprintf(f, "{\"vsci\": \"isolated 8-byte writes of a CLOCK_MONOTONIC time stamp, one "
                   "every pace_us, each into a page of the server's segment not written since "
                   "its last shipment: store = a plain store through the remote map, scimemcpy = "
                   "SCIMemCpy of the same 8 bytes (one RMA write), local_store = a store into "
                   "private memory (the floor of the timing); cpu = CPU of the writing thread "
                   "per write (CLOCK_THREAD_CPUTIME_ID), process_cpu_us = CPU of the whole "
                   "process (getrusage) over the run per write, wall = time in the write, "
                   "visibility = from just before the write until the server, spinning on its "
                   "own segment, saw the value\", \"count\": %u, \"pace_us\": %u",
                R.ts_count, TS_PACE_US);
        for (int k = 0; k < 3; k++) {
            const ts_row_t *t = &R.ts[k];
            fprintf(f, ", \"%s\": ", keys[k]);
            if (!t->ran) {
                fputs("null", f);
                continue;
            }
            fputs("{\"cpu\": ", f);
            json_lat(f, &t->cpu);
            fputs(", \"process_cpu_us\": ", f);
            json_num(f, t->proc_cpu_us);
            fputs(", \"wall\": ", f);
            json_lat(f, &t->wall);
            if (k != TS_LOCAL) {
                fprintf(f, ", \"lost\": %u, \"visibility\": ", t->lost);
                json_lat(f, &t->vis);
            }
            fputs("}", f);
        }
        fputs("},\n", f);
    } else {
        fputs("null,\n", f);
    }

    fputs("  \"mailbox\": ", f);
    if (R.mb_ran) {
        fprintf(f, "{\"vsci\": \"payload word (same value two rounds running) + SCIFlush, flag "
                   "(always 1) + SCIFlush into the server's segment, plain spin for the ack; the "
                   "server checks the payload and clears flag and payload in its own memory, "
                   "then acks through its map\", \"rounds\": %u, \"rounds_total\": %u, "
                   "\"wrong_payloads\": %u, \"wrong_acks\": %u, \"seconds\": ",
                R.mb.n, R.mb_rounds_total, R.mb_wrong, R.mb_ack_wrong);
        json_num(f, R.mb_elapsed_s);
        fputs(", \"rounds_per_s\": ", f);
        json_num(f, R.mb_elapsed_s > 0 ? R.mb.n / R.mb_elapsed_s : NAN);
        fputs(", \"us_per_round\": ", f);
        json_num(f, R.mb.n ? R.mb_elapsed_s * 1e6 / R.mb.n : NAN);
        fputs(", \"round\": ", f);
        json_lat(f, &R.mb);
        fputs("}\n}\n", f);
    } else {
        fputs("null\n}\n", f);
    }
    return json_close("remote_bench", f, path);
}

