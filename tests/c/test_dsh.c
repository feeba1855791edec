/* C-level tests of libdsh: the same scenarios as the core's Rust tests,
 * through include/dsh.h only. Prints "N passed, N failed, N skipped" last. */
#define _GNU_SOURCE
#include "dsh.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444 /* the same on every architecture */
#endif
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int passed, failed, skipped;
static int current_failed, current_skipped;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "  FAIL %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, \
                    #cond, dsh_last_error());                                        \
            current_failed = 1;                                                      \
        }                                                                            \
    } while (0)
#define OK(call) CHECK((call) == DSH_OK)

static void run_test(const char *name, void (*fn)(void)) {
    current_failed = 0;
    current_skipped = 0;
    fn();
    if (current_skipped && !current_failed) {
        skipped++;
        return;
    }
    printf("test %s ... %s\n", name, current_failed ? "FAILED" : "ok");
    if (current_failed) failed++; else passed++;
}

/* Why this kernel cannot confine a command, or NULL when it can. Asked of
 * the kernel directly, not through libdsh, so that a dsh bug that breaks
 * confinement fails the test instead of skipping it. DSH_TEST_FAKE_NO_LANDLOCK=1
 * answers as a kernel without Landlock would, to exercise the skip. */
static const char *landlock_missing(void) {
    const char *fake = getenv("DSH_TEST_FAKE_NO_LANDLOCK");
    if (fake && strcmp(fake, "1") == 0) return "Landlock faked away (DSH_TEST_FAKE_NO_LANDLOCK=1)";
    /* landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) */
    if (syscall(SYS_landlock_create_ruleset, NULL, (size_t)0, 1u) < 1) return "no Landlock on this kernel";
    return NULL;
}

/* Marks the current test skipped, saying why; it is counted as neither
 * passed nor failed. */
static void skip(const char *name, const char *why) {
    printf("test %s ... SKIPPED: %s\n", name, why);
    current_skipped = 1;
}

/* Why a test whose child keeps running after fork() (no exec) cannot run
 * here, or NULL. GCC 12's AddressSanitizer gives its allocator no fork
 * handlers: a child forked while another thread of the host (the
 * executor's, which run on their own) held one of its locks deadlocks in
 * its first allocation (seen about once in 20 runs of fork_after_use).
 * glibc's allocator has them, so the plain C stage runs these tests. */
static const char *fork_without_exec_hazard(void) {
#if defined(__SANITIZE_ADDRESS__)
    return "under GCC's AddressSanitizer a forked child of a multithreaded host can deadlock in the "
           "sanitizer's allocator (no fork handlers); the C stage without ASan runs it";
#else
    return NULL;
#endif
}

static int str_eq(DshStr s, const char *want) {
    return s.ptr != NULL && s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0;
}

static int str_has(DshStr s, const char *needle) {
    return s.ptr != NULL && strstr(s.ptr, needle) != NULL;
}

/* A count one thread bumps and another waits on, so a test waits for the
 * event itself instead of sleeping. */
struct counter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
};
#define COUNTER_INIT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0}

static void counter_bump(struct counter *c) {
    pthread_mutex_lock(&c->mu);
    c->n++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static int counter_get(struct counter *c) {
    pthread_mutex_lock(&c->mu);
    int n = c->n;
    pthread_mutex_unlock(&c->mu);
    return n;
}

static void counter_reset(struct counter *c) {
    pthread_mutex_lock(&c->mu);
    c->n = 0;
    pthread_mutex_unlock(&c->mu);
}

/* True once the count reaches `target`; false if `limit_s` seconds pass first. */
static int counter_wait(struct counter *c, int target, int limit_s) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += limit_s;
    pthread_mutex_lock(&c->mu);
    while (c->n < target && pthread_cond_timedwait(&c->cv, &c->mu, &deadline) != ETIMEDOUT) {
    }
    int reached = c->n >= target;
    pthread_mutex_unlock(&c->mu);
    return reached;
}

static DshExecutor *new_executor(uint64_t grace_ms, uint64_t max_output) {
    DshConfig *config = NULL;
    DshExecutor *exec = NULL;
    OK(dsh_config_new(&config));
    if (grace_ms) OK(dsh_config_set_grace_ms(config, grace_ms));
    if (max_output) OK(dsh_config_set_max_output_bytes(config, max_output));
    OK(dsh_executor_new(config, &exec));
    dsh_config_free(config);
    return exec;
}

/* An executor whose commands and spawned programs get `limit` at `value`. */
static DshExecutor *capped_executor(int limit, uint64_t value) {
    DshConfig *config = NULL;
    DshExecutor *exec = NULL;
    OK(dsh_config_new(&config));
    OK(dsh_config_set_limit(config, limit, value));
    OK(dsh_executor_new(config, &exec));
    dsh_config_free(config);
    return exec;
}

static DshSpec *resolve(DshExecutor *exec, const char *command, uint64_t timeout_ms) {
    DshRequest *req = NULL;
    DshSpec *spec = NULL;
    OK(dsh_request_new(command, strlen(command), &req));
    if (timeout_ms) OK(dsh_request_set_timeout_ms(req, timeout_ms));
    OK(dsh_executor_resolve(exec, req, &spec));
    dsh_request_free(req);
    return spec;
}

static DshRunResult *run(DshExecutor *exec, const char *command, uint64_t timeout_ms) {
    DshSpec *spec = resolve(exec, command, timeout_ms);
    DshRunResult *result = NULL;
    OK(dsh_executor_run(exec, spec, NULL, &result));
    dsh_spec_free(spec);
    return result;
}

static void test_version_and_status_names(void) {
    CHECK(strlen(dsh_version()) > 0);
    // The header's numbers (generated from the Cargo version) are the library's.
    char expected[64];
    snprintf(expected, sizeof expected, "%d.%d.%d", DSH_VERSION_MAJOR, DSH_VERSION_MINOR, DSH_VERSION_PATCH);
    CHECK(strcmp(dsh_version(), expected) == 0);
    CHECK(strcmp(dsh_status_name(DSH_OK), "DSH_OK") == 0);
    CHECK(strcmp(dsh_status_name(DSH_NOT_FOUND), "DSH_NOT_FOUND") == 0);
    CHECK(strcmp(dsh_status_name(12345), "DSH_UNKNOWN") == 0);
}

static void test_exit_codes_and_streams(void) {
    DshExecutor *exec = new_executor(0, 0);
    DshRunResult *r = run(exec, "echo hello; echo oops >&2; exit 3", 0);
    int32_t code = -1;
    CHECK(dsh_run_result_exit_code(r, &code) && code == 3);
    CHECK(dsh_run_result_signal(r).ptr == NULL);
    CHECK(!dsh_run_result_timed_out(r) && !dsh_run_result_aborted(r));
    CHECK(dsh_run_result_timeout_ms(r) == 120000);
    CHECK(str_eq(dsh_run_result_text(r, DSH_STDOUT), "hello\n"));
    CHECK(str_eq(dsh_run_result_text(r, DSH_STDERR), "oops\n"));
    CHECK(!dsh_run_result_truncated(r, DSH_STDOUT));
    CHECK(dsh_run_result_spill_path(r, DSH_STDOUT).ptr == NULL);
    CHECK(dsh_run_result_text(r, 99).ptr == NULL);
    CHECK(!dsh_run_result_sandbox(r, NULL));
    dsh_run_result_free(r);
    /* Output may contain NUL bytes: the length, not strlen, is the truth. */
    r = run(exec, "printf 'a\\0b'", 0);
    DshStr out = dsh_run_result_text(r, DSH_STDOUT);
    CHECK(out.len == 3 && memcmp(out.ptr, "a\0b", 3) == 0);
    dsh_run_result_free(r);
    OK(dsh_executor_dispose(exec));
    dsh_executor_free(exec);
}

static void test_signals_timeout_and_grace(void) {
    DshExecutor *exec = new_executor(300, 0);
    DshRunResult *r = run(exec, "kill -TERM $$", 0);
    CHECK(!dsh_run_result_exit_code(r, NULL));
    CHECK(str_eq(dsh_run_result_signal(r), "SIGTERM"));
    CHECK(!dsh_run_result_timed_out(r) && !dsh_run_result_aborted(r));
    dsh_run_result_free(r);

    r = run(exec, "sleep 30", 200);
    CHECK(dsh_run_result_timed_out(r) && !dsh_run_result_aborted(r));
    CHECK(str_eq(dsh_run_result_signal(r), "SIGTERM"));
    CHECK(dsh_run_result_timeout_ms(r) == 200);
    dsh_run_result_free(r);

    r = run(exec, "trap 'echo got-term' TERM; while :; do sleep 0.05; done", 200);
    CHECK(dsh_run_result_timed_out(r));
    CHECK(str_eq(dsh_run_result_signal(r), "SIGKILL"));
    CHECK(str_has(dsh_run_result_text(r, DSH_STDOUT), "got-term"));
    CHECK(dsh_run_result_survivors(r) == 0);
    dsh_run_result_free(r);
    dsh_executor_free(exec);
}

struct canceller {
    DshCancelToken *token;
    char mark[256];
};

static void *cancel_when_started(void *arg) {
    struct canceller *c = arg;
    for (int i = 0; i < 2000 && access(c->mark, F_OK) != 0; i++) usleep(10000);
    dsh_cancel_token_cancel(c->token);
    return NULL;
}

static void test_cancel_is_aborted_not_timed_out(void) {
    DshExecutor *exec = new_executor(300, 0);
    struct canceller c;
    snprintf(c.mark, sizeof c.mark, "/tmp/dsh-c-cancel-%d", (int)getpid());
    unlink(c.mark);
    OK(dsh_cancel_token_new(&c.token));
    char cmd[512];
    snprintf(cmd, sizeof cmd, "touch %s; sleep 30", c.mark);
    DshSpec *spec = resolve(exec, cmd, 0);
    pthread_t t;
    pthread_create(&t, NULL, cancel_when_started, &c);
    DshRunResult *r = NULL;
    OK(dsh_executor_run(exec, spec, c.token, &r));
    pthread_join(t, NULL);
    CHECK(dsh_run_result_aborted(r) && !dsh_run_result_timed_out(r));
    dsh_run_result_free(r);
    r = NULL;
    CHECK(dsh_executor_run(exec, spec, c.token, &r) == DSH_CANCELLED);
    CHECK(r == NULL);
    dsh_spec_free(spec);
    dsh_cancel_token_free(c.token);
    unlink(c.mark);
    dsh_executor_free(exec);
}

static void test_spill_file_holds_everything(void) {
    DshExecutor *exec = new_executor(0, 1000);
    DshRunResult *r = run(exec, "seq 1 20000", 0);
    CHECK(dsh_run_result_truncated(r, DSH_STDOUT));
    DshStr path = dsh_run_result_spill_path(r, DSH_STDOUT);
    CHECK(path.ptr != NULL);
    struct stat st;
    CHECK(stat(path.ptr, &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    /* seq 1 20000 prints 108894 bytes. */
    CHECK(st.st_size == 108894);
    CHECK(dsh_run_result_text(r, DSH_STDOUT).len == 1000);
    CHECK(str_has(dsh_run_result_text(r, DSH_STDOUT), "19999\n20000\n"));
    dsh_run_result_free(r);
    dsh_executor_free(exec);
}

static void test_spawn_failure_names_enoent_and_path(void) {
    DshExecutor *exec = new_executor(0, 0);
    DshRequest *req = NULL;
    DshSpec *spec = NULL;
    DshRunResult *r = NULL;
    OK(dsh_request_new("true", 4, &req));
    OK(dsh_request_set_workdir(req, "/nonexistent/dsh-c"));
    OK(dsh_executor_resolve(exec, req, &spec));
    CHECK(dsh_executor_run(exec, spec, NULL, &r) == DSH_SPAWN_FAILED);
    CHECK(dsh_last_errno() == ENOENT);
    CHECK(strstr(dsh_last_error(), "ENOENT") && strstr(dsh_last_error(), "/nonexistent/dsh-c"));
    /* In the background it settles as killed and says so once. */
    DshProcess *p = NULL;
    OK(dsh_executor_start(exec, spec, &p));
    OK(dsh_process_wait(p, 30000));
    CHECK(dsh_process_status(p) == DSH_KILLED);
    DshRead *read = NULL;
    OK(dsh_process_read_output(p, &read));
    CHECK(str_has(dsh_read_delta(read), "spawn failed: ENOENT"));
    dsh_read_free(read);
    OK(dsh_process_read_output(p, &read));
    CHECK(dsh_read_delta(read).len == 0);
    dsh_read_free(read);
    dsh_process_free(p);
    dsh_spec_free(spec);
    dsh_request_free(req);
    dsh_executor_free(exec);
}

/* A directory name is bytes: one that is not UTF-8 is a workdir and a
 * workspace root like any other, and comes back byte for byte. The base is
 * outside /tmp, which workspace-write always opens. */
static void test_workdir_that_is_not_utf8(void) {
    char base[] = "/var/tmp/dsh-c-bytes-XXXXXX";
    CHECK(mkdtemp(base) != NULL);
    char dir[64], out[64], inside[80];
    snprintf(dir, sizeof dir, "%s/dir-\xff\xfe", base);
    snprintf(out, sizeof out, "%s/pwd.out", base);
    snprintf(inside, sizeof inside, "%s/inside", dir);
    CHECK(mkdir(dir, 0700) == 0);

    DshExecutor *exec = new_executor(0, 0);
    DshRequest *req = NULL;
    DshSpec *spec = NULL;
    DshRunResult *r = NULL;
    /* Confined to the root named by those bytes: inside is writable, its
     * parent is not. */
    const char *cmd = "echo written > inside; pwd > ../pwd.out";
    OK(dsh_request_new(cmd, strlen(cmd), &req));
    OK(dsh_request_set_workdir(req, dir));
    OK(dsh_request_set_sandbox_policy(req, "workspace-write", dir));
    OK(dsh_executor_resolve(exec, req, &spec));
    CHECK(str_eq(dsh_spec_workdir(spec), dir));
    OK(dsh_executor_run(exec, spec, NULL, &r));
    DshSandboxInfo info;
    memset(&info, 0, sizeof info);
    CHECK(dsh_run_result_sandbox(r, &info) && info.denied);
    CHECK(access(inside, F_OK) == 0 && access(out, F_OK) != 0);
    dsh_run_result_free(r);
    dsh_spec_free(spec);
    dsh_request_free(req);

    /* Unconfined, relative to a config cwd: pwd prints the same bytes. */
    DshConfig *config = NULL;
    DshExecutor *in_base = NULL;
    OK(dsh_config_new(&config));
    OK(dsh_config_set_cwd(config, base));
    OK(dsh_executor_new(config, &in_base));
    dsh_config_free(config);
    OK(dsh_request_new("pwd > ../pwd.out", 16, &req));
    OK(dsh_request_set_workdir(req, "dir-\xff\xfe"));
    OK(dsh_executor_resolve(in_base, req, &spec));
    CHECK(str_eq(dsh_spec_workdir(spec), dir));
    OK(dsh_executor_run(in_base, spec, NULL, &r));
    int32_t code = -1;
    CHECK(dsh_run_result_exit_code(r, &code) && code == 0);
    char got[128] = {0};
    FILE *f = fopen(out, "rb");
    CHECK(f != NULL);
    size_t n = f ? fread(got, 1, sizeof got - 1, f) : 0;
    if (f) fclose(f);
    CHECK(n == strlen(dir) + 1 && memcmp(got, dir, strlen(dir)) == 0 && got[n - 1] == '\n');
    dsh_run_result_free(r);
    dsh_spec_free(spec);
    dsh_request_free(req);
    dsh_executor_free(in_base);
    dsh_executor_free(exec);

    CHECK(unlink(inside) == 0 && unlink(out) == 0 && rmdir(dir) == 0 && rmdir(base) == 0);
}

/* No process, not even a zombie, holds `pid`. */
static int pid_is_free(pid_t pid) { return kill(pid, 0) == -1 && errno == ESRCH; }

/* The pid a command printed first (it starts with `echo $$`). */
static pid_t printed_pid(DshStr text) {
    char buf[32] = "";
    memcpy(buf, text.ptr, text.len < sizeof buf - 1 ? text.len : sizeof buf - 1);
    return (pid_t)atoi(buf);
}

/* A harness checks that a cancelled hook was reaped: when a result or a
   wait returns, the leader's pid is free, however the command ended. */
static void test_settled_commands_are_reaped(void) {
    DshExecutor *exec = new_executor(300, 0);
    for (int round = 0; round < 3; round++) {
        DshRunResult *r = run(exec, "echo $$", 0);
        CHECK(pid_is_free(printed_pid(dsh_run_result_text(r, DSH_STDOUT))));
        dsh_run_result_free(r);
        r = run(exec, "echo $$; exec sleep 30", 200);
        CHECK(dsh_run_result_timed_out(r));
        CHECK(pid_is_free(printed_pid(dsh_run_result_text(r, DSH_STDOUT))));
        dsh_run_result_free(r);

        struct canceller c;
        snprintf(c.mark, sizeof c.mark, "/tmp/dsh-c-reaped-%d", (int)getpid());
        unlink(c.mark);
        OK(dsh_cancel_token_new(&c.token));
        char cmd[512];
        snprintf(cmd, sizeof cmd, "echo $$; touch %s; exec sleep 30", c.mark);
        DshSpec *spec = resolve(exec, cmd, 0);
        pthread_t t;
        pthread_create(&t, NULL, cancel_when_started, &c);
        OK(dsh_executor_run(exec, spec, c.token, &r));
        pthread_join(t, NULL);
        CHECK(dsh_run_result_aborted(r));
        CHECK(pid_is_free(printed_pid(dsh_run_result_text(r, DSH_STDOUT))));
        dsh_run_result_free(r);
        dsh_spec_free(spec);
        dsh_cancel_token_free(c.token);
        unlink(c.mark);

        spec = resolve(exec, "echo $$; exec sleep 30", 0);
        DshProcess *p = NULL;
        OK(dsh_executor_start(exec, spec, &p));
        char seen[64] = "";
        for (int i = 0; i < 2000 && !strchr(seen, '\n'); i++) {
            DshRead *read = NULL;
            OK(dsh_process_read_output(p, &read));
            DshStr d = dsh_read_delta(read);
            strncat(seen, d.ptr, d.len < sizeof seen - strlen(seen) - 1 ? d.len : sizeof seen - strlen(seen) - 1);
            dsh_read_free(read);
            usleep(5000);
        }
        CHECK(dsh_process_kill(p));
        OK(dsh_process_wait(p, -1));
        CHECK(pid_is_free((pid_t)atoi(seen)));
        dsh_process_free(p);
        dsh_spec_free(spec);
    }
    OK(dsh_executor_dispose(exec));
    dsh_executor_free(exec);
}

static void test_background_reads_and_kill_escalation(void) {
    DshExecutor *exec = new_executor(300, 0);
    DshSpec *spec = resolve(exec, "echo one; echo err >&2; trap 'echo got-term' TERM; while :; do sleep 0.05; done", 0);
    DshProcess *p = NULL;
    OK(dsh_executor_start(exec, spec, &p));
    CHECK(str_eq(dsh_process_id(p), "bash-1"));
    CHECK(dsh_process_status(p) == DSH_RUNNING);
    CHECK(dsh_process_wait(p, 50) == DSH_TIMED_OUT);
    /* Poll the consuming read until both streams have arrived. */
    char seen[4096] = "";
    for (int i = 0; i < 2000 && !strstr(seen, "err\n"); i++) {
        DshRead *read = NULL;
        OK(dsh_process_read_output(p, &read));
        DshStr d = dsh_read_delta(read);
        strncat(seen, d.ptr, sizeof seen - strlen(seen) - 1);
        CHECK(!dsh_read_lossy(read));
        dsh_read_free(read);
        usleep(5000);
    }
    CHECK(strcmp(seen, "one\n[stderr]\nerr\n") == 0);
    CHECK(dsh_process_kill(p));
    CHECK(dsh_process_status(p) == DSH_KILLED);
    CHECK(!dsh_process_kill(p));
    OK(dsh_process_wait(p, -1));
    CHECK(dsh_process_is_settled(p));
    CHECK(str_eq(dsh_process_signal(p), "SIGKILL"));
    CHECK(!dsh_process_exit_code(p, NULL));
    CHECK(dsh_process_survivors(p) == 0);
    dsh_process_free(p);
    dsh_spec_free(spec);
    OK(dsh_executor_dispose(exec));
    dsh_executor_free(exec);
}

static struct counter done_calls = COUNTER_INIT;
static atomic_int would_block_seen;
static DshExecutor *callback_exec;

static void on_done(void *user_data, const DshProcess *process) {
    CHECK(dsh_process_status(process) != DSH_RUNNING);
    CHECK(dsh_process_id(process).len > 0);
    /* The process is settled before any listener hears of it: waiting for
       it returns at once. */
    CHECK(dsh_process_is_settled(process));
    CHECK(dsh_process_wait(process, -1) == DSH_OK);
    /* Other blocking calls from a callback are refused, not deadlocked. */
    DshSpec *spec = resolve(callback_exec, "true", 0);
    DshRunResult *r = NULL;
    if (dsh_executor_run(callback_exec, spec, NULL, &r) == DSH_WOULD_BLOCK) atomic_store(&would_block_seen, 1);
    dsh_spec_free(spec);
    /* Last, so a test woken by it sees everything above done. */
    counter_bump((struct counter *)user_data);
}

static void test_registry_and_callbacks(void) {
    DshExecutor *exec = new_executor(300, 0);
    callback_exec = exec;
    counter_reset(&done_calls);
    uint64_t listener = 0;
    OK(dsh_executor_on_task_done(exec, on_done, &done_calls, &listener));
    DshRequest *req = NULL;
    DshSpec *spec = NULL;
    OK(dsh_request_new("echo hi; exit 5", 15, &req));
    OK(dsh_request_set_owner(req, "session-a"));
    OK(dsh_executor_resolve(exec, req, &spec));
    DshProcess *a = NULL, *b = NULL, *got = NULL;
    OK(dsh_executor_start(exec, spec, &a));
    OK(dsh_executor_start(exec, spec, &b));
    OK(dsh_process_wait(a, 30000));
    OK(dsh_process_wait(b, 30000));
    /* Listeners run on the callback thread after settlement. */
    CHECK(counter_wait(&done_calls, 2, 30));
    CHECK(counter_get(&done_calls) == 2);
    CHECK(atomic_load(&would_block_seen) == 1);
    int32_t code = 0;
    CHECK(dsh_process_exit_code(a, &code) && code == 5);
    CHECK(dsh_process_status(a) == DSH_COMPLETED);
    CHECK(str_eq(dsh_process_owner(a), "session-a"));
    CHECK(str_eq(dsh_process_command(a), "echo hi; exit 5"));

    OK(dsh_executor_get(exec, "bash-2", &got));
    CHECK(str_eq(dsh_process_id(got), "bash-2"));
    dsh_process_free(got);
    got = NULL;
    CHECK(dsh_executor_get(exec, "bash-99", &got) == DSH_NOT_FOUND && got == NULL);
    CHECK(strstr(dsh_last_error(), "bash-99") != NULL);

    DshProcessList *list = NULL;
    OK(dsh_executor_list(exec, &list));
    CHECK(dsh_process_list_len(list) == 2);
    CHECK(str_eq(dsh_process_id(dsh_process_list_get(list, 0)), "bash-1"));
    CHECK(str_eq(dsh_process_id(dsh_process_list_get(list, 1)), "bash-2"));
    CHECK(dsh_process_list_get(list, 2) == NULL);
    dsh_process_list_free(list);

    DshRead *read = NULL;
    OK(dsh_executor_read_output(exec, "bash-1", &read));
    CHECK(str_eq(dsh_read_delta(read), "hi\n"));
    dsh_read_free(read);
    bool began = true;
    OK(dsh_executor_kill(exec, "bash-1", &began));
    CHECK(!began);
    CHECK(dsh_executor_kill(exec, "nope", &began) == DSH_NOT_FOUND);

    bool removed = false;
    OK(dsh_executor_off_task_done(exec, listener, &removed));
    CHECK(removed);
    DshProcess *c = NULL;
    OK(dsh_executor_start(exec, spec, &c));
    OK(dsh_process_wait(c, 30000));

    OK(dsh_executor_dispose(exec));
    /* Dispose waited for every queued delivery: the removed listener heard
       nothing more. */
    CHECK(counter_get(&done_calls) == 2);
    OK(dsh_executor_dispose(exec));
    DshRunResult *r = NULL;
    CHECK(dsh_executor_run(exec, spec, NULL, &r) == DSH_DISPOSED);
    DshProcess *d = NULL;
    CHECK(dsh_executor_start(exec, spec, &d) == DSH_DISPOSED);
    dsh_process_free(a);
    dsh_process_free(b);
    dsh_process_free(c);
    dsh_spec_free(spec);
    dsh_request_free(req);
    dsh_executor_free(exec);
}

static void test_null_and_invalid_arguments(void) {
    DshExecutor *exec = NULL;
    DshConfig *config = NULL;
    DshRequest *req = NULL;
    DshSpec *spec = NULL;
    DshRunResult *r = NULL;
    DshProcess *p = NULL;

    CHECK(dsh_executor_new(NULL, NULL) == DSH_INVALID_ARGUMENT);
    CHECK(strstr(dsh_last_error(), "out") != NULL);
    OK(dsh_config_new(&config));
    CHECK(dsh_config_set_grace_ms(config, 1ULL << 31) == DSH_OK);
    CHECK(dsh_executor_new(config, &exec) == DSH_INVALID_ARGUMENT && exec == NULL);
    CHECK(strstr(dsh_last_error(), "config.grace_ms") != NULL);
    OK(dsh_config_set_grace_ms(config, 100));
    CHECK(dsh_config_set_timeout_ms(config, 0) == DSH_OK);
    CHECK(dsh_executor_new(config, &exec) == DSH_INVALID_ARGUMENT);
    CHECK(strstr(dsh_last_error(), "config.timeout_ms") != NULL);
    OK(dsh_config_set_timeout_ms(config, 1000));
    CHECK(dsh_config_set_sandbox_mode(config, "yolo") == DSH_INVALID_ARGUMENT);
    CHECK(strstr(dsh_last_error(), "sandbox_mode") != NULL);
    CHECK(dsh_config_set_cwd(NULL, "/") == DSH_INVALID_ARGUMENT);
    CHECK(dsh_config_set_cwd(config, NULL) == DSH_INVALID_ARGUMENT);
    OK(dsh_executor_new(config, &exec));
    dsh_config_free(config);

    /* Invalid UTF-8 and embedded NUL in a command. */
    CHECK(dsh_request_new("\xff\xfe", 2, &req) == DSH_INVALID_ARGUMENT && req == NULL);
    CHECK(strstr(dsh_last_error(), "UTF-8") != NULL);
    CHECK(dsh_request_new(NULL, 3, &req) == DSH_INVALID_ARGUMENT);
    OK(dsh_request_new("echo a\0b", 8, &req));
    CHECK(dsh_executor_resolve(exec, req, &spec) == DSH_INVALID_ARGUMENT && spec == NULL);
    CHECK(strstr(dsh_last_error(), "request.command") && strstr(dsh_last_error(), "NUL"));
    dsh_request_free(req);
    OK(dsh_request_new("true", 4, &req));
    CHECK(dsh_request_set_env(req, "A=B", "v") == DSH_OK);
    CHECK(dsh_executor_resolve(exec, req, &spec) == DSH_INVALID_ARGUMENT);
    CHECK(strstr(dsh_last_error(), "request.env") != NULL);
    dsh_request_free(req);
    OK(dsh_request_new("true", 4, &req));
    OK(dsh_request_set_dsh_env(req, "NOPE", "v"));
    CHECK(dsh_executor_resolve(exec, req, &spec) == DSH_INVALID_ARGUMENT);
    CHECK(strstr(dsh_last_error(), "DSH_") != NULL);
    dsh_request_free(req);
    OK(dsh_request_new("true", 4, &req));
    CHECK(dsh_request_set_stdin(req, NULL, 5) == DSH_INVALID_ARGUMENT);
    OK(dsh_request_set_stdin(req, NULL, 0));
    CHECK(dsh_request_set_sandbox_policy(req, "nope", NULL) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_request_set_workdir(req, NULL) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_request_set_sandbox_policy(req, "read-only", "/srv/\xff") == DSH_OK);
    OK(dsh_request_set_sandbox_policy(req, "danger-full-access", NULL));
    OK(dsh_executor_resolve(exec, req, &spec));
    CHECK(dsh_executor_resolve(NULL, req, &spec) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_executor_resolve(exec, NULL, &spec) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_executor_resolve(exec, req, NULL) == DSH_INVALID_ARGUMENT);

    CHECK(dsh_executor_run(NULL, spec, NULL, &r) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_executor_run(exec, NULL, NULL, &r) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_executor_run(exec, spec, NULL, NULL) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_executor_start(exec, spec, NULL) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_executor_get(exec, NULL, &p) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_executor_read_output(exec, "bash-1", NULL) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_executor_kill(exec, NULL, NULL) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_executor_on_task_done(exec, NULL, NULL, NULL) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_executor_list(exec, NULL) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_executor_dispose(NULL) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_process_wait(NULL, 0) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_process_read_output(NULL, NULL) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_cancel_token_cancel(NULL) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_cancel_token_new(NULL) == DSH_INVALID_ARGUMENT);

    /* Accessors on NULL return neutral values, never crash. */
    CHECK(!dsh_run_result_exit_code(NULL, NULL));
    CHECK(dsh_run_result_text(NULL, DSH_STDOUT).ptr == NULL);
    CHECK(dsh_process_id(NULL).ptr == NULL);
    CHECK(!dsh_process_kill(NULL));
    CHECK(dsh_read_delta(NULL).ptr == NULL);
    CHECK(dsh_spec_timeout_ms(NULL) == 0);
    CHECK(dsh_process_list_len(NULL) == 0);
    CHECK(dsh_executor_sandbox_mode(NULL).ptr == NULL);
    CHECK(dsh_executor_sandbox_mode(exec).ptr == NULL);

    /* Freeing NULL is a no-op. */
    dsh_executor_free(NULL);
    dsh_config_free(NULL);
    dsh_request_free(NULL);
    dsh_spec_free(NULL);
    dsh_run_result_free(NULL);
    dsh_process_free(NULL);
    dsh_read_free(NULL);
    dsh_process_list_free(NULL);
    dsh_cancel_token_free(NULL);

    CHECK(dsh_spec_timeout_ms(spec) == 1000);
    dsh_spec_free(spec);
    dsh_request_free(req);
    dsh_executor_free(exec);
}

static DshExecutor *shared_exec;

static void *hammer(void *arg) {
    long n = (long)arg;
    for (int i = 0; i < 10; i++) {
        char cmd[64];
        snprintf(cmd, sizeof cmd, "echo %ld-%d", n, i);
        DshSpec *spec = resolve(shared_exec, cmd, 0);
        DshRunResult *r = NULL;
        OK(dsh_executor_run(shared_exec, spec, NULL, &r));
        char want[64];
        snprintf(want, sizeof want, "%ld-%d\n", n, i);
        CHECK(str_eq(dsh_run_result_text(r, DSH_STDOUT), want));
        dsh_run_result_free(r);
        DshProcess *p = NULL;
        OK(dsh_executor_start(shared_exec, spec, &p));
        OK(dsh_process_wait(p, 30000));
        DshRead *read = NULL;
        OK(dsh_process_read_output(p, &read));
        CHECK(str_eq(dsh_read_delta(read), want));
        dsh_read_free(read);
        dsh_process_free(p);
        dsh_spec_free(spec);
    }
    return NULL;
}

static void test_many_threads_share_one_executor(void) {
    shared_exec = new_executor(0, 0);
    pthread_t threads[8];
    for (long i = 0; i < 8; i++) pthread_create(&threads[i], NULL, hammer, (void *)i);
    for (int i = 0; i < 8; i++) pthread_join(threads[i], NULL);
    DshProcessList *list = NULL;
    OK(dsh_executor_list(shared_exec, &list));
    CHECK(dsh_process_list_len(list) == 80);
    dsh_process_list_free(list);
    OK(dsh_executor_dispose(shared_exec));
    dsh_executor_free(shared_exec);
}

static void test_hostile_inputs(void) {
    DshExecutor *exec = new_executor(100, 0);
    /* Random bytes as commands: valid UTF-8 resolves, the rest is refused. */
    unsigned seed = 12345;
    int refused = 0, resolved = 0;
    for (int i = 0; i < 2000; i++) {
        unsigned char cmd[32];
        size_t len = (size_t)(rand_r(&seed) % sizeof cmd);
        for (size_t j = 0; j < len; j++) cmd[j] = (unsigned char)rand_r(&seed);
        DshRequest *req = NULL;
        DshStatus st = dsh_request_new((const char *)cmd, len, &req);
        if (st == DSH_OK) {
            DshSpec *spec = NULL;
            DshStatus rs = dsh_executor_resolve(exec, req, &spec);
            CHECK(rs == DSH_OK || rs == DSH_INVALID_ARGUMENT);
            if (rs == DSH_OK) resolved++; else refused++;
            dsh_spec_free(spec);
            dsh_request_free(req);
        } else {
            CHECK(st == DSH_INVALID_ARGUMENT && req == NULL);
            refused++;
        }
    }
    CHECK(refused > 100 && resolved > 100);

    /* A huge timeout is capped like any long one; a zero budget is refused
     * naming the field. */
    DshRequest *req = NULL;
    DshSpec *spec = NULL;
    OK(dsh_request_new("true", 4, &req));
    OK(dsh_request_set_timeout_ms(req, UINT64_MAX));
    OK(dsh_executor_resolve(exec, req, &spec));
    CHECK(dsh_spec_timeout_ms(spec) == 600000);
    dsh_spec_free(spec);
    spec = NULL;
    OK(dsh_request_set_timeout_ms(req, 1000));
    OK(dsh_request_set_stdout_max_bytes(req, 0));
    CHECK(dsh_executor_resolve(exec, req, &spec) == DSH_INVALID_ARGUMENT);
    CHECK(strstr(dsh_last_error(), "request.stdout_max_bytes") != NULL);
    dsh_request_free(req);
    DshConfig *config = NULL;
    DshExecutor *bad = NULL;
    OK(dsh_config_new(&config));
    OK(dsh_config_set_max_spill_bytes(config, UINT64_MAX));
    CHECK(dsh_executor_new(config, &bad) == DSH_INVALID_ARGUMENT && bad == NULL);
    dsh_config_free(config);

    /* Unknown and malformed ids. */
    const char *ids[] = {"", "bash-0", "bash-99999999999999999999", "../x", "bash-1 "};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        DshProcess *p = NULL;
        bool began = true;
        CHECK(dsh_executor_get(exec, ids[i], &p) == DSH_NOT_FOUND && p == NULL);
        CHECK(dsh_executor_kill(exec, ids[i], &began) == DSH_NOT_FOUND);
    }
    DshProcess *p = NULL;
    CHECK(dsh_executor_get(exec, "\xff\xfe", &p) == DSH_INVALID_ARGUMENT);

    /* Double kill, reads after dispose. */
    spec = resolve(exec, "echo bye; exec sleep 30", 0);
    OK(dsh_executor_start(exec, spec, &p));
    char seen[64] = "";
    for (int i = 0; i < 2000 && !strstr(seen, "bye"); i++) {
        DshRead *r = NULL;
        OK(dsh_process_read_output(p, &r));
        strncat(seen, dsh_read_delta(r).ptr, sizeof seen - strlen(seen) - 1);
        dsh_read_free(r);
        usleep(5000);
    }
    CHECK(dsh_process_kill(p));
    CHECK(!dsh_process_kill(p));
    OK(dsh_executor_dispose(exec));
    CHECK(!dsh_process_kill(p));
    DshRead *r = NULL;
    OK(dsh_process_read_output(p, &r));
    CHECK(dsh_read_delta(r).len == 0);
    dsh_read_free(r);
    OK(dsh_executor_read_output(exec, "bash-1", &r));
    dsh_read_free(r);
    dsh_process_free(p);
    dsh_spec_free(spec);
    dsh_executor_free(exec);
}

static int file_exists(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static void test_landlock_confinement(void) {
    const char *no_landlock = landlock_missing();
    if (no_landlock) {
        skip("landlock_confinement", no_landlock);
        return;
    }
    char base[256], ws[300], out[300], cmd[1200];
    snprintf(base, sizeof base, "/var/tmp/dsh-c-sandbox-%d", (int)getpid());
    snprintf(ws, sizeof ws, "%s/ws", base);
    snprintf(out, sizeof out, "%s/outside", base);
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s %s", base, ws, out);
    CHECK(system(cmd) == 0);

    DshConfig *config = NULL;
    DshExecutor *exec = NULL;
    OK(dsh_config_new(&config));
    OK(dsh_config_set_sandbox_mode(config, "workspace-write"));
    OK(dsh_config_set_cwd(config, ws));
    OK(dsh_executor_new(config, &exec));
    dsh_config_free(config);
    CHECK(str_eq(dsh_executor_sandbox_mode(exec), "workspace-write"));

    /* Inside is writable; outside is not, not even from a grandchild. */
    snprintf(cmd, sizeof cmd, "echo in > inside; bash -c 'bash -c \"echo g > %s/grandchild\"'; echo x > %s/direct", out, out);
    DshRunResult *r = run(exec, cmd, 0);
    CHECK(file_exists(ws, "inside"));
    CHECK(!file_exists(out, "grandchild") && !file_exists(out, "direct"));
    DshSandboxInfo info;
    memset(&info, 0, sizeof info);
    CHECK(dsh_run_result_sandbox(r, &info));
    CHECK(info.mode == DSH_SANDBOX_WORKSPACE_WRITE);
    CHECK(info.denied);
    CHECK(info.enforcement == DSH_ENFORCEMENT_FULL);
    CHECK(!info.runner_failed);
    /* Read-only mounts where the host allows them: metadata outside the
     * workspace is refused too, and the fact says so. */
    const char *no_mounts = dsh_metadata_unavailable();
    CHECK(info.metadata == (no_mounts == NULL));
    dsh_run_result_free(r);
    snprintf(cmd, sizeof cmd, "%s/meta", out);
    int meta = open(cmd, O_CREAT | O_WRONLY, 0644);
    CHECK(meta >= 0 && fchmod(meta, 0644) == 0);
    close(meta);
    char chmod_cmd[1400];
    snprintf(chmod_cmd, sizeof chmod_cmd, "chmod 600 %s", cmd);
    r = run(exec, chmod_cmd, 0);
    struct stat st;
    CHECK(stat(cmd, &st) == 0);
    CHECK((st.st_mode & 07777) == (no_mounts == NULL ? 0644 : 0600));
    CHECK(dsh_run_result_sandbox(r, &info) && info.metadata == (no_mounts == NULL));
    dsh_run_result_free(r);

    /* danger-full-access per call: unconfined, no enforcement to report. */
    DshRequest *req = NULL;
    DshSpec *spec = NULL;
    snprintf(cmd, sizeof cmd, "echo x > %s/danger", out);
    OK(dsh_request_new(cmd, strlen(cmd), &req));
    OK(dsh_request_set_sandbox_policy(req, "danger-full-access", NULL));
    OK(dsh_executor_resolve(exec, req, &spec));
    OK(dsh_executor_run(exec, spec, NULL, &r));
    CHECK(file_exists(out, "danger"));
    CHECK(dsh_run_result_sandbox(r, &info) && info.mode == DSH_SANDBOX_DANGER_FULL_ACCESS);
    CHECK(info.enforcement == DSH_ENFORCEMENT_NONE && !info.denied);
    dsh_run_result_free(r);
    dsh_spec_free(spec);
    dsh_request_free(req);

    /* Confinement that cannot be applied fails closed: nothing runs. */
    snprintf(cmd, sizeof cmd, "touch %s/ran", out);
    OK(dsh_request_new(cmd, strlen(cmd), &req));
    OK(dsh_request_set_sandbox_policy(req, "workspace-write", "/nonexistent/dsh-root"));
    OK(dsh_executor_resolve(exec, req, &spec));
    r = NULL;
    CHECK(dsh_executor_run(exec, spec, NULL, &r) == DSH_SANDBOX_UNAVAILABLE && r == NULL);
    CHECK(strstr(dsh_last_error(), "/nonexistent/dsh-root") != NULL);
    DshProcess *p = NULL;
    OK(dsh_executor_start(exec, spec, &p));
    OK(dsh_process_wait(p, 30000));
    CHECK(dsh_process_status(p) == DSH_KILLED);
    CHECK(dsh_process_sandbox(p, &info) && info.runner_failed && !info.denied);
    CHECK(!file_exists(out, "ran"));
    dsh_process_free(p);
    dsh_spec_free(spec);
    dsh_request_free(req);
    OK(dsh_executor_dispose(exec));
    dsh_executor_free(exec);
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    CHECK(system(cmd) == 0);
}

static atomic_int racing_errors;
static struct counter racing_started = COUNTER_INIT;

static void *race_worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 30; i++) {
        DshSpec *spec = resolve(shared_exec, "sleep 0.02", 0);
        DshRunResult *r = NULL;
        DshStatus st = dsh_executor_run(shared_exec, spec, NULL, &r);
        if (st != DSH_OK && st != DSH_DISPOSED) atomic_fetch_add(&racing_errors, 1);
        dsh_run_result_free(r);
        DshProcess *p = NULL;
        st = dsh_executor_start(shared_exec, spec, &p);
        if (st == DSH_OK) {
            dsh_process_kill(p);
            if (dsh_process_wait(p, 30000) != DSH_OK) atomic_fetch_add(&racing_errors, 1);
        } else if (st != DSH_DISPOSED) {
            atomic_fetch_add(&racing_errors, 1);
        }
        dsh_process_free(p);
        dsh_spec_free(spec);
        if (i == 0) counter_bump(&racing_started);
    }
    return NULL;
}

static void test_calls_racing_dispose(void) {
    shared_exec = new_executor(100, 0);
    atomic_store(&racing_errors, 0);
    pthread_t threads[4];
    counter_reset(&racing_started);
    for (int i = 0; i < 4; i++) pthread_create(&threads[i], NULL, race_worker, NULL);
    /* Dispose once every worker is mid-loop, so it races calls in flight. */
    CHECK(counter_wait(&racing_started, 4, 60));
    OK(dsh_executor_dispose(shared_exec));
    for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
    CHECK(atomic_load(&racing_errors) == 0);
    DshProcessList *list = NULL;
    OK(dsh_executor_list(shared_exec, &list));
    for (size_t i = 0; i < dsh_process_list_len(list); i++) CHECK(dsh_process_is_settled(dsh_process_list_get(list, i)));
    dsh_process_list_free(list);
    dsh_executor_free(shared_exec);
}

/* A child's verdict: 0 when every check passed. */
static int child_checks_passed(void) { return current_failed ? 1 : 0; }

/* Fork after a blocking run (which gave this thread a reactor of its own)
 * and a background start: the child gets DSH_FORKED_CHILD from the parent's
 * objects and a working new executor; the parent is unaffected. The child
 * ends itself with alarm() if it hangs. */
static void test_fork_after_use(void) {
    if (fork_without_exec_hazard()) {
        skip("fork_after_use", fork_without_exec_hazard());
        return;
    }
    DshExecutor *exec = new_executor(300, 0);
    DshSpec *echo = resolve(exec, "echo before", 0);
    DshRunResult *r = NULL;
    OK(dsh_executor_run(exec, echo, NULL, &r));
    CHECK(str_eq(dsh_run_result_text(r, DSH_STDOUT), "before\n"));
    dsh_run_result_free(r);
    DshSpec *sleeper = resolve(exec, "sleep 60", 0);
    DshProcess *bg = NULL;
    OK(dsh_executor_start(exec, sleeper, &bg));
    const char *sleep_argv[] = {"sleep", "60"};
    DshSpawnRequest *req = NULL;
    OK(dsh_spawn_request_new(sleep_argv, 2, &req));
    DshSpawned *spawned = NULL;
    OK(dsh_executor_spawn(exec, req, &spawned));
    dsh_spawn_request_free(req);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        DshRunResult *cr = NULL;
        CHECK(dsh_executor_run(exec, echo, NULL, &cr) == DSH_FORKED_CHILD);
        CHECK(dsh_process_wait(bg, 1000) == DSH_FORKED_CHILD);
        /* Refused, and the parent's program left running (checked below). */
        CHECK(dsh_spawned_terminate(spawned) == DSH_FORKED_CHILD);
        DshExecutor *fresh = new_executor(300, 0);
        DshSpec *child_echo = resolve(fresh, "echo child", 0);
        OK(dsh_executor_run(fresh, child_echo, NULL, &cr));
        CHECK(str_eq(dsh_run_result_text(cr, DSH_STDOUT), "child\n"));
        dsh_run_result_free(cr);
        OK(dsh_executor_dispose(fresh));
        /* Disposing the parent's executor here touches nothing of the parent's. */
        OK(dsh_executor_dispose(exec));
        _exit(child_checks_passed());
    }
    CHECK(pid > 0);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(dsh_process_status(bg) == DSH_RUNNING);
    CHECK(dsh_spawned_wait(spawned, 0) == DSH_TIMED_OUT);
    OK(dsh_spawned_terminate(spawned));
    OK(dsh_spawned_wait(spawned, 30000));
    dsh_spawned_free(spawned);
    OK(dsh_executor_run(exec, echo, NULL, &r));
    CHECK(str_eq(dsh_run_result_text(r, DSH_STDOUT), "before\n"));
    dsh_run_result_free(r);
    CHECK(dsh_process_kill(bg));
    OK(dsh_process_wait(bg, 30000));
    dsh_process_free(bg);
    dsh_spec_free(echo);
    dsh_spec_free(sleeper);
    OK(dsh_executor_dispose(exec));
    dsh_executor_free(exec);
}

/* A host that ignores SIGCHLD: a run that happened is a result with its
 * output, never a spawn failure. */
static void test_sigchld_ignored(void) {
    if (fork_without_exec_hazard()) {
        skip("sigchld_ignored", fork_without_exec_hazard());
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        signal(SIGCHLD, SIG_IGN);
        DshExecutor *exec = new_executor(300, 0);
        DshSpec *spec = resolve(exec, "echo out; exit 3", 0);
        for (int i = 0; i < 10; i++) {
            DshRunResult *r = NULL;
            OK(dsh_executor_run(exec, spec, NULL, &r));
            CHECK(str_eq(dsh_run_result_text(r, DSH_STDOUT), "out\n"));
            int32_t code = -1;
            CHECK(dsh_run_result_exit_code(r, &code) ? code == 3 : dsh_run_result_exit_status_unavailable(r));
            dsh_run_result_free(r);
        }
        dsh_spec_free(spec);
        OK(dsh_executor_dispose(exec));
        dsh_executor_free(exec);
        _exit(child_checks_passed());
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A host's thread-exit destructor (a pthread key) runs after the thread's
 * Rust storage is gone: a dsh call made there still fails cleanly and
 * dsh_last_error still returns a string, instead of aborting the host.
 * Run in a child process, which a crash would kill. */
static int late_ok;
static void late_calls(void *unused) {
    (void)unused;
    late_ok = dsh_config_set_grace_ms(NULL, 5) == DSH_INVALID_ARGUMENT && dsh_last_error() != NULL &&
              dsh_last_errno() == 0;
}
static void *thread_with_exit_destructor(void *key) {
    /* Give this thread its Rust storage first. */
    (void)dsh_config_set_grace_ms(NULL, 5);
    pthread_setspecific(*(pthread_key_t *)key, (void *)1);
    return NULL;
}
static void test_calls_from_thread_exit_destructors(void) {
    if (fork_without_exec_hazard()) {
        skip("calls_from_thread_exit_destructors", fork_without_exec_hazard());
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        pthread_key_t key;
        pthread_key_create(&key, late_calls);
        pthread_t t;
        pthread_create(&t, NULL, thread_with_exit_destructor, &key);
        pthread_join(t, NULL);
        _exit(late_ok ? 0 : 1);
    }
    CHECK(pid > 0);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* ---- host death: a C host dies without dsh_executor_dispose ----------- */

/* LeakSanitizer's documented opt-out hook: a host that exits without
 * disposing leaks on purpose, so its exit is not a leak report. */
static int leaks_on_purpose;
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) { return leaks_on_purpose; }

static const char *const ROUTES[] = {"setsid",    "double",    "nohup",    "trapper",
                                     "envorphan", "envsetsid", "forkloop", "leader"};
#define NROUTES (int)(sizeof ROUTES / sizeof *ROUTES)
static const char *const PLACES[] = {"finished", "background", "foreground"};

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static pid_t read_pid(const char *dir, const char *place, const char *route) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s/%s", dir, place, route);
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (f) {
        if (fscanf(f, "%d", &pid) != 1) pid = 0;
        fclose(f);
    }
    return (pid_t)pid;
}

static int pid_alive(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *close_paren = strrchr(buf, ')');
    return close_paren && close_paren[1] == ' ' && close_paren[2] != 'Z' && close_paren[2] != 'X';
}

/* Live processes whose environment carries HOST_DEATH_MARK=mark: all that
 * the host's commands started except the env -i ones. SIGKILLed with
 * `kill_them`. */
static int marked(const char *mark, int kill_them) {
    char want[128];
    int want_len = snprintf(want, sizeof want, "HOST_DEATH_MARK=%s", mark) + 1;
    DIR *d = opendir("/proc");
    int found = 0;
    struct dirent *e;
    static char env[1 << 16];
    while (d && (e = readdir(d))) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0) continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t n = fread(env, 1, sizeof env, f);
        fclose(f);
        for (size_t i = 0; i + (size_t)want_len <= n; i += strlen(env + i) + 1) {
            if (memcmp(env + i, want, (size_t)want_len) == 0 && pid_alive(pid)) {
                found++;
                if (kill_them) kill(pid, SIGKILL);
                break;
            }
        }
    }
    if (d) closedir(d);
    return found;
}

struct foreground_run {
    DshExecutor *exec;
    DshSpec *spec;
};

static void *run_in_foreground(void *arg) {
    struct foreground_run *f = arg;
    DshRunResult *r = NULL;
    if (dsh_executor_run(f->exec, f->spec, NULL, &r) == DSH_OK) dsh_run_result_free(r);
    return NULL;
}

static void *exit_from_this_thread(void *unused) {
    (void)unused;
    exit(0);
}

/* The host (a forked child): plants every escape from a command that
 * already exited, a background process and a foreground run in progress,
 * says so on `ready`, waits for a byte on `go`, then ends as `ending` says
 * — SIGKILL from the test, exit() from main, or exit() from another thread
 * — never calling dsh_executor_dispose. */
static void death_host(const char *dir, const char *plant, const char *ending, int ready, int go) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* dies with the test */
    alarm(120);
    leaks_on_purpose = 1;
    DshExecutor *exec = new_executor(300, 0);
    char cmd[PATH_MAX * 3];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/finished && . %s %s/finished; exit 0", dir, plant, dir);
    dsh_run_result_free(run(exec, cmd, 0));
    snprintf(cmd, sizeof cmd, "mkdir -p %s/background && . %s %s/background; exec sleep 300", dir, plant, dir);
    DshSpec *bg_spec = resolve(exec, cmd, 0);
    DshProcess *bg = NULL;
    OK(dsh_executor_start(exec, bg_spec, &bg));
    snprintf(cmd, sizeof cmd, "mkdir -p %s/foreground && . %s %s/foreground; exec sleep 300", dir, plant, dir);
    static struct foreground_run fg;
    fg.exec = exec;
    fg.spec = resolve(exec, cmd, 600000);
    pthread_t t;
    pthread_create(&t, NULL, run_in_foreground, &fg);
    for (int i = 0; i < 3000; i++) {
        int all = 1;
        for (int p = 0; p < 3; p++) {
            for (int r = 0; r < NROUTES; r++) all = all && read_pid(dir, PLACES[p], ROUTES[r]) > 0;
        }
        if (all) break;
        usleep(10000);
    }
    if (write(ready, "r", 1) != 1) _exit(3);
    char c;
    if (read(go, &c, 1) != 1) _exit(4);
    if (strcmp(ending, "exit") == 0) exit(0);
    if (strcmp(ending, "thread-exit") == 0) pthread_create(&t, NULL, exit_from_this_thread, NULL);
    for (;;) pause();
}

/* Starts a host, lets it plant, ends it (`sigkill`, `exit`,
 * `thread-exit`) and checks that within a second no process any of its
 * commands started is alive. Whatever happens, leftovers are killed. */
static void host_death(const char *name, const char *ending) {
    if (fork_without_exec_hazard()) {
        skip(name, fork_without_exec_hazard());
        return;
    }
    char plant[PATH_MAX];
    CHECK(realpath("tests/shared/plant-escapes.sh", plant) != NULL);
    char dir[] = "/tmp/dsh-c-host-death-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char mark[64];
    snprintf(mark, sizeof mark, "c-%d-%s", (int)getpid(), ending);
    int ready[2], go[2];
    CHECK(pipe(ready) == 0 && pipe(go) == 0);
    fflush(NULL);
    pid_t host = fork();
    if (host == 0) {
        close(ready[0]);
        close(go[1]);
        setenv("HOST_DEATH_MARK", mark, 1);
        death_host(dir, plant, ending, ready[1], go[0]);
        _exit(0);
    }
    close(ready[1]);
    close(go[0]);
    struct pollfd pfd = {ready[0], POLLIN, 0};
    char c;
    CHECK(poll(&pfd, 1, 60000) == 1 && read(ready[0], &c, 1) == 1);
    pid_t pids[3 * NROUTES];
    int n = 0, all_alive = 1;
    for (int p = 0; p < 3; p++) {
        for (int r = 0; r < NROUTES; r++) {
            if (p == 0 && strcmp(ROUTES[r], "leader") == 0) continue; /* it exited */
            pids[n] = read_pid(dir, PLACES[p], ROUTES[r]);
            all_alive = all_alive && pids[n] > 0 && pid_alive(pids[n]);
            n++;
        }
    }
    CHECK(all_alive);
    double died;
    int status = 0;
    if (strcmp(ending, "sigkill") == 0) {
        kill(host, SIGKILL);
        died = now_ms();
        CHECK(waitpid(host, &status, 0) == host);
    } else {
        CHECK(write(go[1], "g", 1) == 1);
        CHECK(waitpid(host, &status, 0) == host);
        died = now_ms();
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    int left = 0;
    double took = 0;
    for (;;) {
        left = marked(mark, 0);
        for (int i = 0; i < n; i++) left += pid_alive(pids[i]);
        took = now_ms() - died;
        if (left == 0 || took > 10000) break;
        usleep(10000);
    }
    for (int round = 0; round < 5; round++) {
        for (int i = 0; i < n; i++) kill(pids[i], SIGKILL);
        if (marked(mark, 1) == 0) break;
    }
    char rm[sizeof dir + 16];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    CHECK(system(rm) == 0);
    close(ready[0]);
    close(go[1]);
    if (left) fprintf(stderr, "  %d processes survived the host's death (%s)\n", left, ending);
    CHECK(left == 0);
    CHECK(took <= 1000);
    fprintf(stderr, "  host death (%s): tree gone in %.1f ms\n", ending, took);
}

static void test_host_death_sigkill(void) { host_death("host_death_sigkill", "sigkill"); }
static void test_host_death_exit_without_dispose(void) { host_death("host_death_exit_without_dispose", "exit"); }
static void test_host_death_exit_from_another_thread(void) { host_death("host_death_exit_from_another_thread", "thread-exit"); }

/* reconfigure: new commands get the new limits, a bad field changes nothing. */
static void test_reconfigure(void) {
    DshExecutor *exec = new_executor(300, 1000);
    DshConfig *config = NULL;
    OK(dsh_config_new(&config));
    OK(dsh_config_set_max_output_bytes(config, 4));
    OK(dsh_config_set_timeout_ms(config, 900));
    OK(dsh_executor_reconfigure(exec, config));
    DshSpec *spec = resolve(exec, "printf abcdefgh", 0);
    CHECK(dsh_spec_timeout_ms(spec) == 900 && dsh_spec_stdout_max_bytes(spec) == 4);
    DshRunResult *r = NULL;
    OK(dsh_executor_run(exec, spec, NULL, &r));
    CHECK(str_eq(dsh_run_result_text(r, DSH_STDOUT), "efgh"));
    dsh_run_result_free(r);
    dsh_spec_free(spec);
    OK(dsh_config_set_grace_ms(config, 0));
    CHECK(dsh_executor_reconfigure(exec, config) == DSH_INVALID_ARGUMENT);
    CHECK(strstr(dsh_last_error(), "config.grace_ms") != NULL);
    spec = resolve(exec, "true", 0);
    CHECK(dsh_spec_timeout_ms(spec) == 900);
    dsh_spec_free(spec);
    dsh_config_free(config);
    OK(dsh_executor_dispose(exec));
    dsh_executor_free(exec);
}

/* A limited run: `limit` = value, under a 60 s timeout (so a limit that
 * failed ends as a timeout, not a hang). */
static DshRunResult *run_limited(DshExecutor *exec, const char *command, int limit, uint64_t value) {
    DshRequest *req = NULL;
    DshSpec *spec = NULL;
    DshRunResult *r = NULL;
    OK(dsh_request_new(command, strlen(command), &req));
    OK(dsh_request_set_timeout_ms(req, 60000));
    OK(dsh_request_set_limit(req, limit, value));
    OK(dsh_executor_resolve(exec, req, &spec));
    uint64_t got = 0;
    CHECK(dsh_spec_limit(spec, limit, &got) && got == value);
    OK(dsh_executor_run(exec, spec, NULL, &r));
    dsh_spec_free(spec);
    dsh_request_free(req);
    return r;
}

static void test_limits(void) {
    /* A result without a limit reports DSH_MECHANISM_NONE: its name prints. */
    CHECK(dsh_mechanism_name(DSH_MECHANISM_NONE) != NULL && strcmp(dsh_mechanism_name(DSH_MECHANISM_NONE), "none") == 0);
    CHECK(strcmp(dsh_mechanism_name(DSH_MECHANISM_UNSUPPORTED), "unsupported") == 0 && dsh_mechanism_name(99) == NULL);
    if (dsh_limits_support(DSH_LIMIT_PROCESSES) == DSH_MECHANISM_UNSUPPORTED ||
        dsh_limits_support(DSH_LIMIT_MEMORY) == DSH_MECHANISM_UNSUPPORTED) {
        skip("limits", "this host cannot enforce the memory or processes limit");
        return;
    }
    CHECK(strcmp(dsh_limit_name(DSH_LIMIT_FILE_SIZE), "file_size") == 0 && dsh_limit_name(0) == NULL);
    CHECK(strcmp(dsh_mechanism_name(dsh_limits_support(DSH_LIMIT_CPU)), "rlimit") == 0);
    DshExecutor *exec = new_executor(500, 0);

    /* A fork bomb (armed only inside a group limited to 32) ends by the
     * process limit, not by the timeout. */
    DshRunResult *r = run_limited(
        exec,
        "g=$(sed -n 's/^[0-9]*:pids://p' /proc/self/cgroup); "
        "[ \"$(cat /sys/fs/cgroup/pids$g/pids.max)\" = 32 ] || exit 9; b() { b | b & }; b; wait",
        DSH_LIMIT_PROCESSES, 32);
    CHECK(dsh_run_result_limit(r) == DSH_LIMIT_PROCESSES);
    CHECK(!dsh_run_result_timed_out(r) && !dsh_run_result_aborted(r));
    CHECK(dsh_run_result_limit_enforcement(r, DSH_LIMIT_PROCESSES) == DSH_MECHANISM_CGROUP_V1);
    CHECK(dsh_run_result_limit_enforcement(r, DSH_LIMIT_MEMORY) == DSH_MECHANISM_NONE);
    dsh_run_result_free(r);

    /* A memory hog ends by the memory limit. */
    r = run_limited(exec, "a=x; while :; do a=$a$a; done", DSH_LIMIT_MEMORY, 32u << 20);
    CHECK(dsh_run_result_limit(r) == DSH_LIMIT_MEMORY);
    dsh_run_result_free(r);

    /* A CPU spin ends by SIGXCPU; a file grown past the limit by SIGXFSZ. */
    r = run_limited(exec, "while :; do :; done", DSH_LIMIT_CPU, 1);
    CHECK(dsh_run_result_limit(r) == DSH_LIMIT_CPU && str_eq(dsh_run_result_signal(r), "SIGXCPU"));
    CHECK(dsh_run_result_limit_enforcement(r, DSH_LIMIT_CPU) == DSH_MECHANISM_RLIMIT);
    dsh_run_result_free(r);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "exec yes > /tmp/dsh-c-fsize-%d", (int)getpid());
    r = run_limited(exec, cmd, DSH_LIMIT_FILE_SIZE, 65536);
    CHECK(dsh_run_result_limit(r) == DSH_LIMIT_FILE_SIZE && str_eq(dsh_run_result_signal(r), "SIGXFSZ"));
    dsh_run_result_free(r);
    snprintf(cmd, sizeof cmd, "/tmp/dsh-c-fsize-%d", (int)getpid());
    struct stat st;
    CHECK(stat(cmd, &st) == 0 && st.st_size == 65536);
    unlink(cmd);

    /* Within its limits a command runs and reports no limit. */
    r = run_limited(exec, "ulimit -n", DSH_LIMIT_OPEN_FILES, 50);
    CHECK(str_eq(dsh_run_result_text(r, DSH_STDOUT), "50\n") && dsh_run_result_limit(r) == DSH_LIMIT_NONE);
    dsh_run_result_free(r);

    /* A limit the kernel refuses fails closed. */
    DshRequest *req = NULL;
    DshSpec *spec = NULL;
    OK(dsh_request_new("true", 4, &req));
    OK(dsh_request_set_limit(req, DSH_LIMIT_OPEN_FILES, (uint64_t)1 << 40));
    OK(dsh_executor_resolve(exec, req, &spec));
    r = NULL;
    CHECK(dsh_executor_run(exec, spec, NULL, &r) == DSH_LIMIT_UNAVAILABLE && r == NULL);
    CHECK(strstr(dsh_last_error(), "limits.open_files") != NULL);
    dsh_spec_free(spec);
    dsh_request_free(req);

    /* Bad input names the field; a background process reports its limit. */
    OK(dsh_request_new("sleep 30", 8, &req));
    CHECK(dsh_request_set_limit(req, 42, 1) == DSH_INVALID_ARGUMENT);
    OK(dsh_request_set_limit(req, DSH_LIMIT_CPU, 0));
    CHECK(dsh_executor_resolve(exec, req, &spec) == DSH_INVALID_ARGUMENT);
    CHECK(strcmp(dsh_last_error(), "request.limits.cpu_seconds must be a positive finite number, got 0") == 0);
    dsh_request_free(req);
    DshExecutor *capped = capped_executor(DSH_LIMIT_PROCESSES, 8);
    spec = resolve(capped, "for i in $(seq 20); do sleep 30 & done; wait", 0);
    uint64_t got = 0;
    CHECK(dsh_spec_limit(spec, DSH_LIMIT_PROCESSES, &got) && got == 8);
    DshProcess *p = NULL;
    OK(dsh_executor_start(capped, spec, &p));
    OK(dsh_process_wait(p, 30000));
    CHECK(dsh_process_limit(p) == DSH_LIMIT_PROCESSES);
    CHECK(dsh_process_limit_enforcement(p, DSH_LIMIT_PROCESSES) == DSH_MECHANISM_CGROUP_V1);
    dsh_process_free(p);
    dsh_spec_free(spec);
    OK(dsh_executor_dispose(capped));
    dsh_executor_free(capped);
    OK(dsh_executor_dispose(exec));
    dsh_executor_free(exec);
}

static DshProcess *start_piped(DshExecutor *exec, const char *command) {
    DshRequest *req = NULL;
    DshSpec *spec = NULL;
    DshProcess *p = NULL;
    OK(dsh_request_new(command, strlen(command), &req));
    OK(dsh_request_set_stdin_pipe(req));
    OK(dsh_executor_resolve(exec, req, &spec));
    OK(dsh_executor_start(exec, spec, &p));
    dsh_request_free(req);
    dsh_spec_free(spec);
    return p;
}

/* Writes all of data with the non-blocking call plus the wait; returns the
 * number of DSH_AGAIN answers, or -1 on another status. */
static int write_all(const DshProcess *p, const unsigned char *data, size_t len) {
    int again = 0;
    while (len > 0) {
        size_t n = 0;
        DshStatus st = dsh_process_write_stdin(p, data, len, &n);
        if (st == DSH_AGAIN) {
            again++;
            CHECK(n == 0);
            if (dsh_process_wait_stdin_writable(p, 30000) != DSH_OK) return -1;
            continue;
        }
        if (st != DSH_OK) return -1;
        CHECK(n > 0 && n <= len);
        data += n;
        len -= n;
    }
    return again;
}

static char *read_all_output(const DshProcess *p) {
    CHECK(dsh_process_wait(p, 30000) == DSH_OK);
    DshRead *read = NULL;
    OK(dsh_process_read_output(p, &read));
    DshStr d = dsh_read_delta(read);
    char *out = strndup(d.ptr ? d.ptr : "", d.len);
    dsh_read_free(read);
    return out;
}

static void test_stdin_pipe(void) {
    /* A C host keeps SIGPIPE's default action (terminate) and unblocked:
       no write below may raise it in this process. */
    signal(SIGPIPE, SIG_DFL);
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_UNBLOCK, &pipe_set, NULL);

    DshExecutor *exec = new_executor(300, 0);
    /* Several MiB through the non-blocking write, then EOF: an exact count. */
    size_t len = 5 * 1024 * 1024 + 3;
    unsigned char *data = malloc(len);
    for (size_t i = 0; i < len; i++) data[i] = (unsigned char)(i * 2654435761u >> 13);
    DshProcess *p = start_piped(exec, "wc -c");
    CHECK(write_all(p, data, len) >= 0);
    bool closed = false;
    OK(dsh_process_close_stdin(p, &closed));
    CHECK(closed);
    OK(dsh_process_close_stdin(p, &closed));
    CHECK(!closed);
    char *out = read_all_output(p);
    char want[32];
    snprintf(want, sizeof want, "%zu\n", len);
    CHECK(strcmp(out, want) == 0);
    free(out);
    dsh_process_free(p);

    /* Interleaved with cat: each line comes back before the next is sent. */
    p = start_piped(exec, "cat");
    for (int i = 0; i < 10; i++) {
        char line[32], seen[64] = "";
        snprintf(line, sizeof line, "line %d\n", i);
        CHECK(write_all(p, (const unsigned char *)line, strlen(line)) >= 0);
        for (int tries = 0; tries < 6000 && strcmp(seen, line) != 0; tries++) {
            DshRead *read = NULL;
            OK(dsh_process_read_output(p, &read));
            strncat(seen, dsh_read_delta(read).ptr, sizeof seen - strlen(seen) - 1);
            dsh_read_free(read);
            if (strcmp(seen, line) != 0) usleep(5000);
        }
        CHECK(strcmp(seen, line) == 0);
    }
    OK(dsh_process_close_stdin(p, NULL));
    CHECK(dsh_process_wait(p, 30000) == DSH_OK);
    int32_t code = -1;
    CHECK(dsh_process_exit_code(p, &code) && code == 0);
    dsh_process_free(p);

    /* A reader that takes nothing: the write stops at the bound with
       DSH_AGAIN instead of buffering, and the wait says it is still full. */
    char dir[] = "/tmp/dsh-c-stdin-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char gate[128], command[512];
    snprintf(gate, sizeof gate, "%s/gate", dir);
    snprintf(command, sizeof command, "while [ ! -e %s ]; do sleep 0.01; done; cat >/dev/null", gate);
    p = start_piped(exec, command);
    size_t taken = 0, n = 0;
    DshStatus st;
    while ((st = dsh_process_write_stdin(p, data, len, &n)) == DSH_OK) taken += n;
    CHECK(st == DSH_AGAIN);
    CHECK(strstr(dsh_last_error(), "full") != NULL);
    CHECK(taken < len);
    CHECK(taken <= 64 * 1024 + 1024 * 1024); /* the buffer plus at most a big pipe */
    CHECK(dsh_process_wait_stdin_writable(p, 0) == DSH_TIMED_OUT);
    FILE *g = fopen(gate, "w");
    CHECK(g != NULL);
    if (g) fclose(g);
    CHECK(dsh_process_wait_stdin_writable(p, 30000) == DSH_OK);
    CHECK(write_all(p, data, len) >= 0);
    OK(dsh_process_close_stdin(p, NULL));
    CHECK(dsh_process_wait(p, 30000) == DSH_OK);
    dsh_process_free(p);
    unlink(gate);
    rmdir(dir);

    /* A command that closes its stdin: DSH_STDIN_CLOSED, and this process
       (SIGPIPE at its default) is still here to see it. */
    p = start_piped(exec, "exec 0<&-; echo closed; sleep 30");
    char seen[64] = "";
    for (int tries = 0; tries < 6000 && strcmp(seen, "closed\n") != 0; tries++) {
        DshRead *read = NULL;
        OK(dsh_process_read_output(p, &read));
        strncat(seen, dsh_read_delta(read).ptr, sizeof seen - strlen(seen) - 1);
        dsh_read_free(read);
        usleep(5000);
    }
    CHECK(write_all(p, data, len) == -1);
    CHECK(dsh_process_write_stdin(p, data, 1, &n) == DSH_STDIN_CLOSED);
    CHECK(strstr(dsh_last_error(), "the command closed its stdin") != NULL);
    CHECK(dsh_process_status(p) == DSH_RUNNING);
    CHECK(dsh_process_kill(p));
    dsh_process_free(p);

    /* After exit, and without a pipe: DSH_STDIN_CLOSED naming why. */
    p = start_piped(exec, "true");
    CHECK(dsh_process_wait(p, 30000) == DSH_OK);
    CHECK(dsh_process_write_stdin(p, data, 1, &n) == DSH_STDIN_CLOSED);
    CHECK(strstr(dsh_last_error(), "has exited") != NULL);
    dsh_process_free(p);
    DshSpec *spec = resolve(exec, "true", 0);
    OK(dsh_executor_start(exec, spec, &p));
    CHECK(dsh_process_write_stdin(p, data, 1, &n) == DSH_STDIN_CLOSED);
    CHECK(strstr(dsh_last_error(), "not started with a stdin pipe") != NULL);
    CHECK(dsh_process_close_stdin(p, NULL) == DSH_STDIN_CLOSED);
    CHECK(dsh_process_write_stdin(NULL, data, 1, &n) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_process_write_stdin(p, data, 1, NULL) == DSH_INVALID_ARGUMENT);
    CHECK(strcmp(dsh_status_name(DSH_AGAIN), "DSH_AGAIN") == 0);
    CHECK(strcmp(dsh_status_name(DSH_STDIN_CLOSED), "DSH_STDIN_CLOSED") == 0);
    dsh_process_free(p);
    dsh_spec_free(spec);
    free(data);
    OK(dsh_executor_dispose(exec));
    dsh_executor_free(exec);
}

static void test_network_deny(void) {
    if (landlock_missing()) {
        skip("network_deny", landlock_missing());
        return;
    }
    DshExecutor *exec = new_executor(500, 0);
    char cmd[512];
    /* A TCP connect (bash's /dev/tcp) is refused; a Unix socket pair works. */
    snprintf(cmd, sizeof cmd,
             "(exec 3<>/dev/tcp/127.0.0.1/9) 2>/dev/null && echo tcp-open || echo tcp-refused; "
             "python3 -c 'import socket; a, b = socket.socketpair(); a.send(b\"u\"); print(b.recv(1).decode())' "
             "2>/dev/null || echo u");
    DshRequest *req = NULL;
    DshSpec *spec = NULL;
    DshRunResult *r = NULL;
    OK(dsh_request_new(cmd, strlen(cmd), &req));
    CHECK(dsh_request_set_sandbox_network(req, "deny") == DSH_INVALID_ARGUMENT); /* no policy yet */
    OK(dsh_request_set_sandbox_policy(req, "workspace-write", "/tmp"));
    CHECK(dsh_request_set_sandbox_network(req, "lan") == DSH_INVALID_ARGUMENT);
    OK(dsh_request_set_sandbox_network(req, "deny"));
    OK(dsh_executor_resolve(exec, req, &spec));
    OK(dsh_executor_run(exec, spec, NULL, &r));
    CHECK(str_eq(dsh_run_result_text(r, DSH_STDOUT), "tcp-refused\nu\n"));
    DshSandboxInfo info;
    memset(&info, 0, sizeof info);
    CHECK(dsh_run_result_sandbox(r, &info));
    CHECK(info.network == DSH_NETWORK_DENY && info.network_enforcement == DSH_ENFORCEMENT_FULL);
    dsh_run_result_free(r);
    dsh_spec_free(spec);
    dsh_request_free(req);
    /* loopback: a TCP connect to 127.0.0.1 is let through (refused by the
     * closed port), one elsewhere is not permitted. It needs root and
     * cgroup v2; without them it fails closed. */
    snprintf(cmd, sizeof cmd,
             "(exec 3<>/dev/tcp/127.0.0.1/9) 2>&1 | grep -q 'Connection refused' && echo lo-refused; "
             "(exec 3<>/dev/tcp/192.0.2.1/9) 2>&1 | grep -q 'Operation not permitted' && echo out-denied");
    OK(dsh_request_new(cmd, strlen(cmd), &req));
    OK(dsh_request_set_sandbox_policy(req, "danger-full-access", NULL));
    OK(dsh_request_set_sandbox_network(req, "loopback"));
    OK(dsh_executor_resolve(exec, req, &spec));
    r = NULL;
    DshStatus st = dsh_executor_run(exec, spec, NULL, &r);
    if (geteuid() == 0 && access("/sys/fs/cgroup/unified/cgroup.procs", W_OK) == 0) {
        CHECK(st == DSH_OK);
        CHECK(str_eq(dsh_run_result_text(r, DSH_STDOUT), "lo-refused\nout-denied\n"));
        memset(&info, 0, sizeof info);
        CHECK(dsh_run_result_sandbox(r, &info) && info.network == DSH_NETWORK_LOOPBACK);
        CHECK(info.network_enforcement == DSH_ENFORCEMENT_FULL);
    } else {
        CHECK((st == DSH_OK) || (st == DSH_SANDBOX_UNAVAILABLE && strstr(dsh_last_error(), "loopback") != NULL));
    }
    dsh_run_result_free(r);
    dsh_spec_free(spec);
    dsh_request_free(req);
    OK(dsh_executor_dispose(exec));
    dsh_executor_free(exec);
}

/* A thread blocked in dsh_process_wait_stdin_writable(-1) on a full stdin. */
struct stdin_waiter {
    const DshProcess *p;
    DshStatus status;
};

static void *blocked_waiter(void *arg) {
    struct stdin_waiter *w = arg;
    w->status = dsh_process_wait_stdin_writable(w->p, -1);
    return NULL;
}

static void test_stdin_misuse(void) {
    DshExecutor *exec = new_executor(300, 0);
    DshProcess *p = start_piped(exec, "sleep 60");
    size_t n = 7;
    /* NULL data with a length is refused naming it; with 0 it only looks. */
    CHECK(dsh_process_write_stdin(p, NULL, 5, &n) == DSH_INVALID_ARGUMENT);
    CHECK(strstr(dsh_last_error(), "data") != NULL);
    OK(dsh_process_write_stdin(p, NULL, 0, &n));
    CHECK(n == 0);
    CHECK(dsh_process_wait_stdin_writable(NULL, 0) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_process_close_stdin(NULL, NULL) == DSH_INVALID_ARGUMENT);
    CHECK(dsh_run_result_background_id(NULL).ptr == NULL);
    CHECK(dsh_request_set_on_expiry(NULL, "kill") == DSH_INVALID_ARGUMENT);
    CHECK(dsh_request_set_stdin_pipe(NULL) == DSH_INVALID_ARGUMENT);
    /* Fill the stdin (the command never reads), then free this handle: a
     * second one from dsh_executor_get keeps working, and a thread blocked
     * on the full stdin wakes (at the latest) when the process is killed. */
    size_t len = 1 << 20;
    unsigned char *data = calloc(1, len);
    /* Full means the buffer and the pipe behind it: the I/O thread moves
     * bytes from one to the other, so fill until no room comes back for a
     * while (one AGAIN alone can come before the pipe filled). */
    do {
        while (dsh_process_write_stdin(p, data, len, &n) == DSH_OK) {
        }
    } while (dsh_process_wait_stdin_writable(p, 300) == DSH_OK);
    CHECK(dsh_process_write_stdin(p, data, len, &n) == DSH_AGAIN);
    DshStr id = dsh_process_id(p);
    char *idc = strndup(id.ptr, id.len);
    dsh_process_free(p);
    DshProcess *q = NULL;
    OK(dsh_executor_get(exec, idc, &q));
    CHECK(q != NULL);
    CHECK(dsh_process_write_stdin(q, data, len, &n) == DSH_AGAIN);
    struct stdin_waiter w = {q, DSH_INTERNAL};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, blocked_waiter, &w) == 0);
    CHECK(dsh_process_kill(q));
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(w.status == DSH_OK);
    /* The waiter may also have woken for room the pipe made: once the
     * process has settled, its stdin has surely ended. */
    CHECK(dsh_process_wait(q, 30000) == DSH_OK);
    CHECK(dsh_process_write_stdin(q, data, 1, &n) == DSH_STDIN_CLOSED);
    bool closed = true;
    OK(dsh_process_close_stdin(q, &closed));
    CHECK(!closed);
    OK(dsh_process_close_stdin(q, &closed)); /* twice: still nothing to do */
    CHECK(!closed);
    dsh_process_free(q);
    free(idc);
    free(data);
    OK(dsh_executor_dispose(exec));
    dsh_executor_free(exec);
}

static void test_on_expiry_background(void) {
    DshExecutor *exec = new_executor(300, 0);
    const char *command = "echo before; sleep 0.5; echo after";
    DshRequest *req = NULL;
    DshSpec *spec = NULL;
    OK(dsh_request_new(command, strlen(command), &req));
    OK(dsh_request_set_timeout_ms(req, 100));
    CHECK(dsh_request_set_on_expiry(req, "later") == DSH_INVALID_ARGUMENT);
    CHECK(strstr(dsh_last_error(), "request.on_expiry") != NULL);
    OK(dsh_request_set_on_expiry(req, "background"));
    OK(dsh_executor_resolve(exec, req, &spec));
    DshRunResult *r = NULL;
    OK(dsh_executor_run(exec, spec, NULL, &r));
    CHECK(dsh_run_result_timed_out(r));
    CHECK(!dsh_run_result_exit_code(r, NULL));
    CHECK(dsh_run_result_signal(r).ptr == NULL);
    CHECK(str_eq(dsh_run_result_text(r, DSH_STDOUT), "before\n"));
    DshStr id = dsh_run_result_background_id(r);
    CHECK(str_eq(id, "bash-1"));
    DshProcess *p = NULL;
    OK(dsh_executor_get(exec, id.ptr, &p));
    char *out = read_all_output(p);
    CHECK(strcmp(out, "after\n") == 0);
    free(out);
    CHECK(dsh_process_status(p) == DSH_COMPLETED);
    dsh_process_free(p);
    dsh_run_result_free(r);
    dsh_spec_free(spec);
    dsh_request_free(req);
    /* The default still kills, and names no process. */
    r = run(exec, "sleep 30", 100);
    CHECK(dsh_run_result_timed_out(r));
    CHECK(str_eq(dsh_run_result_signal(r), "SIGTERM"));
    CHECK(dsh_run_result_background_id(r).ptr == NULL);
    dsh_run_result_free(r);
    OK(dsh_executor_dispose(exec));
    dsh_executor_free(exec);
}

/* Reads a terminal until `want` appears in what it printed (appended to
 * `seen`, of size `cap`), or 30 s pass. */
static int term_expect(DshTerminal *t, char *seen, size_t cap, const char *want) {
    for (int i = 0; i < 300 && !strstr(seen, want); i++) {
        DshTerminalRead *r = NULL;
        if (dsh_terminal_read(t, 100, &r) != DSH_OK) return 0;
        DshStr text = dsh_terminal_read_text(r);
        size_t len = strlen(seen);
        if (text.ptr && len + text.len < cap) memcpy(seen + len, text.ptr, text.len + 1);
        int ended = dsh_terminal_read_ended(r);
        dsh_terminal_read_free(r);
        if (ended) break;
    }
    return strstr(seen, want) != NULL;
}

/* Waits (30 s at most) until the kernel shows the foreground group waiting
 * for input; returns the group, or -1. */
static int32_t term_waiting(DshTerminal *t) {
    for (int i = 0; i < 3000; i++) {
        int32_t group = 0;
        bool waiting = false;
        if (dsh_terminal_inspect_foreground(t, &group, &waiting) && waiting) return group;
        struct timespec ms = {0, 10000000};
        nanosleep(&ms, NULL);
    }
    return -1;
}

/* wait_input_waiting: right after a write it is false until the program
 * reads the terminal again (here it waits on a fifo in between); a pty relay
 * (script) whose program sleeps is not waiting. */
static void test_terminal_wait_input_waiting(void) {
    char dir[] = "/tmp/dsh-c-waiting-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char fifo[64], cmd[160];
    snprintf(fifo, sizeof fifo, "%s/go", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    snprintf(cmd, sizeof cmd, "while read -r x; do read -r y < '%s'; done", fifo);
    DshExecutor *exec;
    CHECK(dsh_executor_new(NULL, &exec) == DSH_OK);
    DshTerminalRequest *req;
    CHECK(dsh_terminal_request_new_command(cmd, &req) == DSH_OK);
    DshTerminal *t;
    CHECK(dsh_executor_spawn_terminal(exec, req, &t) == DSH_OK);
    dsh_terminal_request_free(req);
    for (int i = 0; i < 5; i++) {
        bool w = false;
        CHECK(dsh_terminal_wait_input_waiting(t, 30000, &w) == DSH_OK && w);
        CHECK(dsh_terminal_write(t, (const uint8_t *)"line\n", 5) == DSH_OK);
        bool now = true;
        CHECK(dsh_terminal_inspect_foreground(t, NULL, &now) && !now);
        CHECK(dsh_terminal_wait_input_waiting(t, 200, &w) == DSH_OK && !w);
        FILE *f = fopen(fifo, "w");
        CHECK(f != NULL);
        fputs("go\n", f);
        fclose(f);
    }
    uint32_t survivors = 1;
    CHECK(dsh_terminal_terminate(t, &survivors) == DSH_OK && survivors == 0);
    dsh_terminal_free(t);
    if (system("script --version >/dev/null 2>&1") == 0) {
        CHECK(dsh_terminal_request_new_command("script -qc 'echo in; sleep 1000' /dev/null", &req) == DSH_OK);
        CHECK(dsh_executor_spawn_terminal(exec, req, &t) == DSH_OK);
        dsh_terminal_request_free(req);
        static char seen2[4096];
        seen2[0] = 0;
        CHECK(term_expect(t, seen2, sizeof seen2, "in"));
        bool w = true;
        CHECK(dsh_terminal_wait_input_waiting(t, 300, &w) == DSH_OK && !w);
        CHECK(dsh_terminal_terminate(t, &survivors) == DSH_OK && survivors == 0);
        dsh_terminal_free(t);
    } else {
        printf("  skipped the pty relay case: no util-linux script here\n");
    }
    unlink(fifo);
    rmdir(dir);
    dsh_executor_dispose(exec);
    dsh_executor_free(exec);
}

/* Waits (30 s at most) until process `pid` runs as `name`. */
static bool wait_comm(int32_t pid, const char *name) {
    char path[64], buf[64];
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    for (int i = 0; i < 3000; i++) {
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[n] = 0;
            if (n && buf[n - 1] == '\n') buf[n - 1] = 0;
            if (strcmp(buf, name) == 0) return true;
        }
        struct timespec ms = {0, 10000000};
        nanosleep(&ms, NULL);
    }
    return false;
}

static void test_terminal_session(void) {
    /* A grace period a loaded machine cannot outrun: bash must end on the
     * hangup, not on the SIGKILL that follows the grace. */
    DshExecutor *exec = new_executor(10000, 0);
    const char *argv[] = {"bash", "--norc", "--noprofile", "-i"};
    DshTerminalRequest *req = NULL;
    OK(dsh_terminal_request_new_argv(argv, 4, &req));
    OK(dsh_terminal_request_set_env(req, "PS1", "$ ", false));
    OK(dsh_terminal_request_set_env(req, "HISTFILE", "", false));
    OK(dsh_terminal_request_set_size(req, 30, 100));
    DshTerminal *t = NULL;
    OK(dsh_executor_spawn_terminal(exec, req, &t));
    dsh_terminal_request_free(req);
    if (!t) return;
    static char seen[1 << 16];
    seen[0] = 0;
    int32_t pid = dsh_terminal_pid(t);
    CHECK(term_waiting(t) == pid);
    const char *line = "echo size=$(stty size) term=$TERM\n";
    OK(dsh_terminal_write(t, (const uint8_t *)line, strlen(line)));
    CHECK(term_expect(t, seen, sizeof seen, "size=30 100 term=xterm-256color"));
    OK(dsh_terminal_resize(t, 40, 120));
    CHECK(term_waiting(t) == pid);
    line = "sleep 100\n";
    OK(dsh_terminal_write(t, (const uint8_t *)line, strlen(line)));
    int32_t job = -1;
    for (int i = 0; i < 3000 && (job == -1 || job == pid); i++) {
        dsh_terminal_inspect_foreground(t, &job, NULL);
        struct timespec ms = {0, 10000000};
        nanosleep(&ms, NULL);
    }
    CHECK(job != pid && job > 0);
    /* The group is in front from bash's fork on; signalled before the child
     * has become sleep, bash's handler in that child may swallow it. */
    CHECK(wait_comm(job, "sleep"));
    int32_t signalled = 0;
    OK(dsh_terminal_signal_foreground(t, "SIGINT", &signalled));
    CHECK(signalled == job);
    CHECK(dsh_terminal_signal_foreground(t, "SIGUSR1", NULL) == DSH_INVALID_ARGUMENT);
    CHECK(strstr(dsh_last_error(), "terminal.signal") != NULL);
    CHECK(term_waiting(t) == pid);
    line = "echo st=$? $(stty size)\n";
    OK(dsh_terminal_write(t, (const uint8_t *)line, strlen(line)));
    CHECK(term_expect(t, seen, sizeof seen, "st=130 40 120"));
    CHECK(dsh_terminal_wait(t, 0) == DSH_TIMED_OUT);
    uint32_t survivors = 99;
    OK(dsh_terminal_terminate(t, &survivors));
    CHECK(survivors == 0);
    CHECK(!pid_alive(pid));
    OK(dsh_terminal_wait(t, -1));
    /* bash ends on the hangup, normally by re-raising SIGHUP; how exactly
     * is bash's business (one CI run saw another ending under load, so it
     * is printed), what terminate() promises is asserted above. */
    if (!str_eq(dsh_terminal_exit_signal(t), "SIGHUP")) {
        DshStr sig = dsh_terminal_exit_signal(t);
        int32_t code = -1;
        fprintf(stderr, "  terminal ended by %.*s (exit code %d)\n", sig.ptr ? (int)sig.len : 9,
                sig.ptr ? sig.ptr : "no signal", dsh_terminal_exit_code(t, &code) ? code : -1);
    }
    {
        int32_t code = 0;
        CHECK(dsh_terminal_exit_signal(t).ptr != NULL ||
              (dsh_terminal_exit_code(t, &code) && code == 128 + SIGHUP));
    }
    CHECK(dsh_terminal_write(t, (const uint8_t *)"x", 1) == DSH_TERMINAL_CLOSED);
    CHECK(!dsh_terminal_inspect_foreground(t, NULL, NULL));
    dsh_terminal_free(t);

    /* A command line, a bad size, a program that is not there. */
    OK(dsh_terminal_request_new_command("read -r -p 'ok? ' a; exit 7", &req));
    OK(dsh_executor_spawn_terminal(exec, req, &t));
    dsh_terminal_request_free(req);
    CHECK(term_waiting(t) > 0);
    OK(dsh_terminal_write(t, (const uint8_t *)"y\n", 2));
    OK(dsh_terminal_wait(t, 30000));
    int32_t code = 0;
    CHECK(dsh_terminal_exit_code(t, &code) && code == 7);
    dsh_terminal_free(t);
    OK(dsh_terminal_request_new_argv(argv, 1, &req));
    OK(dsh_terminal_request_set_size(req, 0, 80));
    CHECK(dsh_executor_spawn_terminal(exec, req, &t) == DSH_INVALID_ARGUMENT);
    CHECK(strstr(dsh_last_error(), "request.rows") != NULL);
    dsh_terminal_request_free(req);
    const char *missing[] = {"no-such-program-dsh"};
    OK(dsh_terminal_request_new_argv(missing, 1, &req));
    CHECK(dsh_executor_spawn_terminal(exec, req, &t) == DSH_SPAWN_FAILED);
    CHECK(dsh_last_errno() == ENOENT);
    dsh_terminal_request_free(req);

    /* Dispose ends a session nobody terminated. */
    OK(dsh_terminal_request_new_argv(argv, 4, &req));
    OK(dsh_executor_spawn_terminal(exec, req, &t));
    dsh_terminal_request_free(req);
    pid = dsh_terminal_pid(t);
    CHECK(term_waiting(t) == pid);
    OK(dsh_executor_dispose(exec));
    CHECK(!pid_alive(pid));
    dsh_terminal_free(t);
    dsh_executor_free(exec);
}

/* Spawned programs (docs/spawn.md): argv never given to a shell, offset
 * reads, raw pipes handed over, and a tree that outlives its leader. */
static void test_spawned_programs(void) {
    DshExecutor *exec = new_executor(300, 0);
    const char *argv[] = {"printf", "%s|", "$HOME", "a; b"};
    DshSpawnRequest *req = NULL;
    OK(dsh_spawn_request_new(argv, 4, &req));
    OK(dsh_spawn_request_set_output(req, DSH_STDOUT, DSH_SPAWN_OUTPUT_COLLECT, 4, -1));
    DshSpawned *s = NULL;
    OK(dsh_executor_spawn(exec, req, &s));
    dsh_spawn_request_free(req);
    if (!s) return;
    CHECK(dsh_spawned_pid(s) > 0);
    OK(dsh_spawned_wait(s, 20000));
    int32_t code = -1;
    CHECK(dsh_spawned_exit_code(s, &code) && code == 0);
    DshOffsetRead *r = NULL;
    OK(dsh_spawned_read_from(s, DSH_STDOUT, 0, &r));
    /* A 4-byte window over "$HOME|a; b|": the tail, lossy, no spill file. */
    CHECK(str_eq(dsh_offset_read_text(r), "; b|"));
    CHECK(dsh_offset_read_lossy(r) && dsh_offset_read_next_offset(r) == 11);
    CHECK(dsh_offset_read_spill_path(r).ptr == NULL);
    dsh_offset_read_free(r);
    CHECK(dsh_spawned_take_fd(s, 1) == -1);
    CHECK(dsh_spawned_read_from(s, 7, 0, &r) == DSH_INVALID_ARGUMENT);
    dsh_spawned_free(s);

    /* Raw pipes: cat echoes what is written to it. */
    const char *cat[] = {"cat"};
    OK(dsh_spawn_request_new(cat, 1, &req));
    OK(dsh_spawn_request_set_stdin(req, DSH_SPAWN_STDIN_PIPE, NULL, 0));
    OK(dsh_spawn_request_set_output(req, DSH_STDOUT, DSH_SPAWN_OUTPUT_PIPE, 0, -1));
    CHECK(dsh_spawn_request_set_stdin(req, 42, NULL, 0) == DSH_INVALID_ARGUMENT);
    OK(dsh_executor_spawn(exec, req, &s));
    dsh_spawn_request_free(req);
    int in = dsh_spawned_take_fd(s, 0), out = dsh_spawned_take_fd(s, 1);
    CHECK(in >= 0 && out >= 0 && dsh_spawned_take_fd(s, 0) == -1);
    CHECK(fcntl(in, F_GETFD) & FD_CLOEXEC);
    CHECK(write(in, "a\0b", 3) == 3);
    close(in);
    char buf[8] = {0};
    ssize_t got = 0, n;
    while ((n = read(out, buf + got, sizeof buf - got)) > 0) got += n;
    close(out);
    CHECK(got == 3 && memcmp(buf, "a\0b", 3) == 0);
    OK(dsh_spawned_wait(s, 20000));
    dsh_spawned_free(s);

    /* The leader exits; its setsid grandchild lives until terminate. */
    const char *leave[] = {"bash", "-c", "setsid sleep 300 >/dev/null 2>&1 & echo $!"};
    OK(dsh_spawn_request_new(leave, 3, &req));
    OK(dsh_spawn_request_set_env(req, "PATH", getenv("PATH")));
    OK(dsh_spawn_request_set_env(req, "HOME", NULL));
    OK(dsh_executor_spawn(exec, req, &s));
    dsh_spawn_request_free(req);
    OK(dsh_spawned_wait(s, 20000));
    OK(dsh_spawned_read_from(s, DSH_STDOUT, 0, &r));
    int grandchild = atoi(dsh_offset_read_text(r).ptr);
    dsh_offset_read_free(r);
    CHECK(grandchild > 0 && pid_alive(grandchild));
    CHECK(dsh_spawned_wait_tree(s, 300) == DSH_TIMED_OUT);
    OK(dsh_spawned_terminate(s));
    OK(dsh_spawned_wait_tree(s, 20000));
    CHECK(!pid_alive(grandchild));
    dsh_spawned_free(s);

    /* A timeout stops the tree (SIGTERM: the trap runs) and says so. */
    const char *slow[] = {"bash", "-c", "trap 'exit 143' TERM; while :; do sleep 0.05; done"};
    OK(dsh_spawn_request_new(slow, 3, &req));
    OK(dsh_spawn_request_set_timeout_ms(req, 200));
    OK(dsh_executor_spawn(exec, req, &s));
    dsh_spawn_request_free(req);
    OK(dsh_spawned_wait(s, 20000));
    CHECK(dsh_spawned_timed_out(s));
    CHECK(dsh_spawned_exit_code(s, &code) && code == 143);
    dsh_spawned_free(s);
    CHECK(!dsh_spawned_timed_out(NULL));
    OK(dsh_spawn_request_new(slow, 3, &req));
    OK(dsh_spawn_request_set_timeout_ms(req, 0));
    CHECK(dsh_executor_spawn(exec, req, &s) == DSH_INVALID_ARGUMENT);
    CHECK(strstr(dsh_last_error(), "spawn.timeout_ms") != NULL);
    dsh_spawn_request_free(req);

    /* A program that cannot start: DSH_SPAWN_FAILED, ENOENT, nothing runs. */
    const char *missing[] = {"no-such-program-dsh"};
    OK(dsh_spawn_request_new(missing, 1, &req));
    s = NULL;
    CHECK(dsh_executor_spawn(exec, req, &s) == DSH_SPAWN_FAILED && s == NULL);
    CHECK(dsh_last_errno() == ENOENT);
    dsh_spawn_request_free(req);
    OK(dsh_spawn_request_new(NULL, 0, &req));
    CHECK(dsh_executor_spawn(exec, req, &s) == DSH_INVALID_ARGUMENT);
    CHECK(strstr(dsh_last_error(), "spawn.argv") != NULL);
    dsh_spawn_request_free(req);
    OK(dsh_executor_dispose(exec));
    dsh_executor_free(exec);

    /* The executor's limits hold for its spawned programs, and the handle
     * says which one ended it and how it was enforced. */
    DshExecutor *capped = capped_executor(DSH_LIMIT_FILE_SIZE, 4096);
    char dir[] = "/tmp/dsh-c-spawn-limit-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char script[256];
    snprintf(script, sizeof script, "exec yes > %s/big", dir);
    const char *writer[] = {"sh", "-c", script};
    OK(dsh_spawn_request_new(writer, 3, &req));
    OK(dsh_executor_spawn(capped, req, &s));
    dsh_spawn_request_free(req);
    OK(dsh_spawned_wait(s, 30000));
    CHECK(str_eq(dsh_spawned_exit_signal(s), "SIGXFSZ"));
    CHECK(dsh_spawned_limit(s) == DSH_LIMIT_FILE_SIZE);
    CHECK(dsh_spawned_limit_enforcement(s, DSH_LIMIT_FILE_SIZE) == DSH_MECHANISM_RLIMIT);
    CHECK(dsh_spawned_limit_enforcement(s, DSH_LIMIT_MEMORY) == DSH_MECHANISM_NONE);
    CHECK(dsh_spawned_limit(NULL) == DSH_LIMIT_NONE);
    dsh_spawned_free(s);
    char big[300];
    snprintf(big, sizeof big, "%s/big", dir);
    unlink(big);
    rmdir(dir);
    OK(dsh_executor_dispose(capped));
    dsh_executor_free(capped);
}

int main(void) {
    run_test("version_and_status_names", test_version_and_status_names);
    run_test("exit_codes_and_streams", test_exit_codes_and_streams);
    run_test("signals_timeout_and_grace", test_signals_timeout_and_grace);
    run_test("cancel_is_aborted_not_timed_out", test_cancel_is_aborted_not_timed_out);
    run_test("spill_file_holds_everything", test_spill_file_holds_everything);
    run_test("spawn_failure_names_enoent_and_path", test_spawn_failure_names_enoent_and_path);
    run_test("workdir_that_is_not_utf8", test_workdir_that_is_not_utf8);
    run_test("settled_commands_are_reaped", test_settled_commands_are_reaped);
    run_test("background_reads_and_kill_escalation", test_background_reads_and_kill_escalation);
    run_test("registry_and_callbacks", test_registry_and_callbacks);
    run_test("null_and_invalid_arguments", test_null_and_invalid_arguments);
    run_test("many_threads_share_one_executor", test_many_threads_share_one_executor);
    run_test("hostile_inputs", test_hostile_inputs);
    run_test("calls_racing_dispose", test_calls_racing_dispose);
    run_test("landlock_confinement", test_landlock_confinement);
    run_test("limits", test_limits);
    run_test("network_deny", test_network_deny);
    run_test("fork_after_use", test_fork_after_use);
    run_test("sigchld_ignored", test_sigchld_ignored);
    run_test("calls_from_thread_exit_destructors", test_calls_from_thread_exit_destructors);
    run_test("reconfigure", test_reconfigure);
    run_test("stdin_pipe", test_stdin_pipe);
    run_test("stdin_misuse", test_stdin_misuse);
    run_test("on_expiry_background", test_on_expiry_background);
    run_test("spawned_programs", test_spawned_programs);
    run_test("terminal_session", test_terminal_session);
    run_test("terminal_wait_input_waiting", test_terminal_wait_input_waiting);
    run_test("host_death_sigkill", test_host_death_sigkill);
    run_test("host_death_exit_without_dispose", test_host_death_exit_without_dispose);
    run_test("host_death_exit_from_another_thread", test_host_death_exit_from_another_thread);
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
