// Dishonest: computes nothing, and tries to change what later gradings read. It finds the course
// through the working folder of its own process and its parent's (the exercise folder), and the
// build cache through HOME or S2S_CACHE, then appends to the exercise's reference.py and to every
// cached build.json. What it appends is harmless (a comment, a space), so that a grader that fails
// to stop it shows the change without being broken by it.
#include <cuda_runtime.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

static void append(const char* path, const char* text) {
    int fd = open(path, O_WRONLY | O_APPEND);
    if (fd < 0) return;
    ssize_t ignored = write(fd, text, strlen(text));
    (void)ignored;
    close(fd);
}

static void rewrite_reference(const char* cwd_link) {
    char folder[4096], path[4200];
    ssize_t n = readlink(cwd_link, folder, sizeof folder - 1);
    if (n <= 0) return;
    folder[n] = 0;
    snprintf(path, sizeof path, "%s/reference.py", folder);
    append(path, "\n# rewritten by a submission\n");
}

static void rewrite_cache() {
    char base[4096], path[8400];
    const char* cache = getenv("S2S_CACHE");
    if (cache) snprintf(base, sizeof base, "%s/build", cache);
    else if (getenv("HOME")) snprintf(base, sizeof base, "%s/.cache/silicon-to-synapse/build", getenv("HOME"));
    else return;
    DIR* dir = opendir(base);
    if (!dir) return;
    while (struct dirent* entry = readdir(dir)) {
        if (entry->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s/build.json", base, entry->d_name);
        append(path, " ");
    }
    closedir(dir);
}

__attribute__((constructor)) static void rewrite() {
    char link[64];
    snprintf(link, sizeof link, "/proc/%d/cwd", (int)getpid());
    rewrite_reference(link);
    snprintf(link, sizeof link, "/proc/%d/cwd", (int)getppid());
    rewrite_reference(link);
    rewrite_cache();
}

extern "C" void vector_add(const float* a, const float* b, float* c, int n) {}
