/* Shared by the C benchmark drivers: timing, stats, JSON output, ballast. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One JSON line: {"bench":..,"impl":..,"host_mb":..,"median_us":..,"min_us":..,"max_us":..,"n":..EXTRA}
 * (EXTRA: more fields, each starting with a comma, or ""). */
static void report_with(const char *bench, const char *impl, long host_mb, double *samples, int n, const char *extra) {
    qsort(samples, (size_t)n, sizeof *samples, cmp_double);
    printf("{\"bench\":\"%s\",\"impl\":\"%s\",\"host_mb\":%ld,\"median_us\":%.3f,\"min_us\":%.3f,\"max_us\":%.3f,\"n\":%d%s}\n",
           bench, impl, host_mb, samples[n / 2], samples[0], samples[n - 1], n, extra);
    fflush(stdout);
}

static void report(const char *bench, const char *impl, long host_mb, double *samples, int n) {
    report_with(bench, impl, host_mb, samples, n, "");
}

/* Touches `mb` MiB so the host's page tables are that large. */
static void *ballast(long mb) {
    if (mb <= 0) return NULL;
    size_t size = (size_t)mb << 20;
    char *p = malloc(size);
    if (!p) { perror("ballast"); exit(1); }
    for (size_t i = 0; i < size; i += 4096) p[i] = 1;
    return p;
}
