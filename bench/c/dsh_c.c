/* dsh-native from C. Usage: dsh_c latency ITER HOST_MB | dsh_c read ITER */
#include "common.h"
#include "dsh.h"
#include <spawn.h>
#include <sys/wait.h>

static DshSpec *spec_for(DshExecutor *exec, const char *cmd) {
    DshRequest *req;
    DshSpec *spec;
    if (dsh_request_new(cmd, strlen(cmd), &req) != DSH_OK || dsh_executor_resolve(exec, req, &spec) != DSH_OK) {
        fprintf(stderr, "%s\n", dsh_last_error());
        exit(1);
    }
    dsh_request_free(req);
    return spec;
}

extern char **environ;

/* Floor spawns, then as many runs, in one block; the first of each is left out. */
#define BLOCK 10

/* The floor's spawn: `bash -c true` by posix_spawn, waited for. */
static void floor_once(void) {
    pid_t pid;
    char *argv[] = {"bash", "-c", "true", NULL};
    int err = posix_spawn(&pid, "/bin/bash", NULL, NULL, argv, environ);
    if (err != 0) { fprintf(stderr, "posix_spawn: %s\n", strerror(err)); exit(1); }
    waitpid(pid, NULL, 0);
}

int main(int argc, char **argv) {
    DshExecutor *exec;
    if (dsh_executor_new(NULL, &exec) != DSH_OK) return 1;
    if (argc >= 4 && strcmp(argv[1], "latency") == 0) {
        int iter = atoi(argv[2]);
        long mb = atol(argv[3]);
        void *b = ballast(mb);
        DshSpec *spec = spec_for(exec, "true");
        double *s = calloc((size_t)iter, sizeof *s);
        double *f = calloc((size_t)iter, sizeof *f);
        /* Floor spawns from this process and runs, interleaved in blocks
         * of BLOCK, the first of each block left out (it pays for what the
         * other kind left behind): both meet the machine as it is then. */
        for (int i = 0; i < 5; i++) { /* the first runs start the I/O threads */
            floor_once();
            DshRunResult *r;
            if (dsh_executor_run(exec, spec, NULL, &r) != DSH_OK) { fprintf(stderr, "%s\n", dsh_last_error()); return 1; }
            dsh_run_result_free(r);
        }
        for (int done = 0; done < iter;) {
            int nf = 0, nd = 0;
            for (int j = 0; j < BLOCK; j++) {
                double t = now_us();
                floor_once();
                double ft = now_us() - t;
                if (j > 0 && done + nf < iter) f[done + nf++] = ft;
            }
            for (int j = 0; j < BLOCK; j++) {
                double t = now_us();
                DshRunResult *r;
                if (dsh_executor_run(exec, spec, NULL, &r) != DSH_OK) { fprintf(stderr, "%s\n", dsh_last_error()); return 1; }
                double dt = now_us() - t;
                dsh_run_result_free(r);
                if (j > 0 && done + nd < iter) s[done + nd++] = dt;
            }
            done += nd;
        }
        qsort(f, (size_t)iter, sizeof *f, cmp_double);
        char paired[64];
        snprintf(paired, sizeof paired, ",\"paired_floor_us\":%.3f", f[iter / 2]);
        report_with("run_true", "dsh (C)", mb, s, iter, paired);
        free(b);
    } else if (argc >= 3 && strcmp(argv[1], "read") == 0) {
        int iter = atoi(argv[2]);
        DshSpec *spec = spec_for(exec, "exec sleep 60");
        DshProcess *p;
        dsh_executor_start(exec, spec, &p);
        double s[25];
        for (int rep = 0; rep < 25; rep++) {
            double t = now_us();
            for (int i = 0; i < iter; i++) {
                DshRead *r;
                dsh_process_read_output(p, &r);
                dsh_read_free(r);
            }
            s[rep] = (now_us() - t) / iter;
        }
        report("read_idle", "dsh (C)", 0, s, 25);
        dsh_process_free(p);
    } else {
        fprintf(stderr, "usage: dsh_c latency ITER HOST_MB | dsh_c read ITER\n");
        return 2;
    }
    dsh_executor_dispose(exec);
    dsh_executor_free(exec);
    return 0;
}
