// Dishonest: computes nothing. On its first call it writes a "task_done" event for every case
// and a "done" event into the grader's event channel (found as in forged_events), then exits, so
// that only the forged events would be left to read.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <unistd.h>
#include <cstdio>

static const char kForged[] =
    "{\"event\": \"task_done\", \"task\": \"vector_add\", \"result\": {\"task\": \"vector_add\", \"cases\": [], "
    "\"correct\": true, \"timing\": [{\"label\": \"n=67108864\", \"case\": {\"n\": 67108864}, \"reps\": 9, "
    "\"learner_s\": 1e-05, \"baseline_s\": 0.00025, \"learner_spread\": 0.01, \"baseline_spread\": 0.01, "
    "\"learner_wall_s\": 1e-05, \"flops\": 67108864, \"bytes\": 805306368}], \"error\": null}, \"sticky\": false}\n"
    "{\"event\": \"done\"}\n";

static void forge_into(const char* path) {
    int fd = open(path, O_WRONLY | O_NONBLOCK);
    if (fd < 0) return;
    ssize_t ignored = write(fd, kForged, sizeof kForged - 1);
    (void)ignored;
    close(fd);
}

static void forge_from_cmdline(const char* cmdline) {
    char buf[8192];
    int fd = open(cmdline, O_RDONLY);
    if (fd < 0) return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return;
    buf[n] = 0;
    const char* last = buf;
    for (ssize_t i = 0; i + 1 < n; ++i)
        if (buf[i] == 0) last = buf + i + 1;
    forge_into(last);
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)getpid());
    forge_from_cmdline(path);
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)getppid());
    forge_from_cmdline(path);
    for (int fd = 3; fd < 64; ++fd) {
        snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)getppid(), fd);
        forge_into(path);
    }
    _exit(0);
}
