/* The floor: posix_spawn("/bin/bash", "-c", "true") + waitpid, in a loop.
 * Usage: floor latency ITER HOST_MB | floor starts N  (N × `sleep 0.2`, all reaped)
 *      | floor lockstep  (one spawn per byte read on stdin, its microseconds
 *        written back as a line: a driver in another language pairs each of
 *        its runs with one of these, as the Rust and C drivers do in-process) */
#include "common.h"
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static pid_t spawn_bash(const char *cmd) {
    pid_t pid;
    char *argv[] = {"bash", "-c", (char *)cmd, NULL};
    if (posix_spawn(&pid, "/bin/bash", NULL, NULL, argv, environ) != 0) { perror("posix_spawn"); exit(1); }
    return pid;
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "latency") == 0) {
        int iter = atoi(argv[2]);
        long mb = atol(argv[3]);
        void *b = ballast(mb);
        double *s = calloc((size_t)iter, sizeof *s);
        for (int i = 0; i < iter; i++) {
            double t = now_us();
            pid_t pid = spawn_bash("true");
            waitpid(pid, NULL, 0);
            s[i] = now_us() - t;
        }
        report("run_true", "floor (C posix_spawn)", mb, s, iter);
        free(b);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "lockstep") == 0) {
        char go;
        while (read(0, &go, 1) == 1) {
            double t = now_us();
            pid_t pid = spawn_bash("true");
            waitpid(pid, NULL, 0);
            printf("%.3f\n", now_us() - t);
            fflush(stdout);
        }
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "starts") == 0) {
        int n = atoi(argv[2]);
        pid_t *pids = calloc((size_t)n, sizeof *pids);
        double samples[5];
        for (int rep = 0; rep < 5; rep++) {
            double t = now_us();
            for (int i = 0; i < n; i++) pids[i] = spawn_bash("sleep 0.2");
            for (int i = 0; i < n; i++) waitpid(pids[i], NULL, 0);
            samples[rep] = now_us() - t;
        }
        report("starts_sleep", "floor (C posix_spawn)", 0, samples, 5);
        return 0;
    }
    fprintf(stderr, "usage: floor latency ITER HOST_MB | floor starts N\n");
    return 2;
}
