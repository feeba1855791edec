/* dsh-native from C. Usage: dsh_c latency ITER HOST_MB | dsh_c read ITER */
#include "common.h"
#include "dsh.h"

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

int main(int argc, char **argv) {
    DshExecutor *exec;
    if (dsh_executor_new(NULL, &exec) != DSH_OK) return 1;
    if (argc >= 4 && strcmp(argv[1], "latency") == 0) {
        int iter = atoi(argv[2]);
        long mb = atol(argv[3]);
        void *b = ballast(mb);
        DshSpec *spec = spec_for(exec, "true");
        double *s = calloc((size_t)iter, sizeof *s);
        for (int i = 0; i < iter + 5; i++) {
            double t = now_us();
            DshRunResult *r;
            if (dsh_executor_run(exec, spec, NULL, &r) != DSH_OK) { fprintf(stderr, "%s\n", dsh_last_error()); return 1; }
            double dt = now_us() - t;
            dsh_run_result_free(r);
            if (i >= 5) s[i - 5] = dt; /* the first runs start the I/O threads */
        }
        report("run_true", "dsh (C)", mb, s, iter);
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
