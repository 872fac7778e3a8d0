/*
 * server/resources.c — what this process may use of the machine: CPUs,
 * which --workers and --http-threads default to, and memory, against
 * which start-up checks its own bounds.
 *
 * CPUs: sysconf(_SC_NPROCESSORS_ONLN) counts the machine's. In a container
 * limited to 2 CPUs on a 64-CPU host (docker --cpus 2, a Kubernetes CPU
 * limit) attnd would start 64 workers and be throttled by the quota, and
 * under taskset it would start more workers than it may run. So the count
 * is the smallest of the online CPUs, the affinity mask and the cgroup's
 * CPU quota rounded up.
 *
 * Memory: the cgroup's memory limit (docker --memory, a Kubernetes memory
 * limit), past which the kernel kills the process.
 *
 * The cgroup is found as the kernel shows it: /proc/self/mountinfo names
 * where a controller is mounted (cgroup v1, where a line's super options
 * hold its name) or the unified hierarchy (cgroup v2), and from which
 * root; /proc/self/cgroup names the process's cgroup under that root. A
 * limit is the smallest over that cgroup and its ancestors under the mount
 * point, since a parent's limit binds its children. Written here because
 * neither libuv nor glibc reads cgroup limits: libuv 1.44's
 * uv_available_parallelism, used for the affinity mask, counts only that.
 */
#include "server/resources.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#define CPUS_MAX 256u

/* Where a controller lives: the mount point and the cgroup path that is
 * its root (v1 or v2). */
struct cg_mount {
    char point[PATH_MAX];
    char root[PATH_MAX];
    bool v2;
};

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
    char *w = s;
    for (char *r = s; *r; w++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '7' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 4;
        } else {
            *w = *r++;
        }
    }
    *w = '\0';
}

/* Whether the comma-separated list holds the word. */
static bool has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, word, n) == 0 && (p[n] == ',' || p[n] == '\0' || p[n] == '\n'))
            return true;
    return false;
}

/* One mountinfo line: "id parent maj:min root point options [tags] - type
 * source super-options". True if it is the controller's mount (v1), or the
 * unified hierarchy (v2), filled into *m. */
static bool parse_mount(char *line, const char *controller, struct cg_mount *m)
{
    char *dash = strstr(line, " - ");
    if (!dash)
        return false;
    *dash = '\0';
    char type[32], source[256], super[1024];
    if (sscanf(dash + 3, "%31s %255s %1023s", type, source, super) != 3)
        return false;
    bool v1 = strcmp(type, "cgroup") == 0 && has_word(super, controller);
    bool v2 = strcmp(type, "cgroup2") == 0;
    if (!v1 && !v2)
        return false;
    char root[PATH_MAX], point[PATH_MAX];
    if (sscanf(line, "%*s %*s %*s %4095s %4095s", root, point) != 2)
        return false;
    unescape(root);
    unescape(point);
    snprintf(m->root, sizeof m->root, "%s", root);
    snprintf(m->point, sizeof m->point, "%s", point);
    m->v2 = v2;
    return true;
}

/* The controller's mount: v1's if it is mounted there (then v2 does not
 * have it), else the unified hierarchy's, /sys/fs/cgroup before others
 * (where a host's tree is also mounted elsewhere, by a monitoring agent,
 * say). Lines are read whole (getline): overlay mounts' can be long. */
static bool find_mount(const char *mountinfo, const char *controller, struct cg_mount *out)
{
    FILE *f = fopen(mountinfo, "re");
    if (!f)
        return false;
    bool v1 = false, v2 = false, v2_usual = false;
    char *line = NULL;
    size_t cap = 0;
    struct cg_mount m;
    while (!v1 && getline(&line, &cap, f) > 0) {
        if (!parse_mount(line, controller, &m))
            continue;
        bool usual = m.v2 && strcmp(m.point, "/sys/fs/cgroup") == 0;
        if (m.v2 && (v2_usual || (v2 && !usual)))
            continue;
        *out = m;
        v1 = !m.v2;
        v2 = v2 || m.v2;
        v2_usual = v2_usual || usual;
    }
    free(line);
    fclose(f);
    return v1 || v2;
}

/* The process's cgroup path in the hierarchy of m, from /proc/self/cgroup's
 * "id:controllers:path" lines (v2: id 0, no controllers). */
static bool find_cgroup(const char *cgroup, const struct cg_mount *m, const char *controller,
                        char *path, size_t cap)
{
    FILE *f = fopen(cgroup, "re");
    if (!f)
        return false;
    bool found = false;
    char *line = NULL;
    size_t n = 0;
    while (!found && getline(&line, &n, f) > 0) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c1 = *c2 = '\0';               /* id, controllers, path */
        bool mine = m->v2 ? strcmp(line, "0") == 0 && c1[1] == '\0'
                          : has_word(c1 + 1, controller);
        if (mine) {
            c2[1 + strcspn(c2 + 1, "\n")] = '\0';
            found = snprintf(path, cap, "%s", c2 + 1) < (int)cap;
        }
    }
    free(line);
    fclose(f);
    return found;
}

/* The CPU quota of one cgroup directory, in CPUs; false if none. */
static bool cpu_quota_at(const char *dir, bool v2, long double *cpus)
{
    char file[2 * PATH_MAX + 32];
    long long quota = -1, period = 0;
    snprintf(file, sizeof file, "%s/%s", dir, v2 ? "cpu.max" : "cpu.cfs_quota_us");
    FILE *f = fopen(file, "re");
    if (!f)
        return false;
    char word[32] = "";
    bool ok = v2 ? fscanf(f, "%31s %lld", word, &period) == 2 : fscanf(f, "%lld", &quota) == 1;
    fclose(f);
    if (v2 && ok) {
        char *end;
        quota = strcmp(word, "max") == 0 ? -1 : strtoll(word, &end, 10);
        ok = strcmp(word, "max") == 0 || *end == '\0';
    }
    if (!v2 && ok) {
        snprintf(file, sizeof file, "%s/cpu.cfs_period_us", dir);
        f = fopen(file, "re");
        ok = f && fscanf(f, "%lld", &period) == 1;
        if (f)
            fclose(f);
    }
    if (!ok || quota <= 0 || period <= 0)
        return false;
    *cpus = (long double)quota / (long double)period;
    return true;
}

/* The memory limit of one cgroup directory, in bytes; false if none (v1
 * writes "none" as the largest page count the kernel keeps, near 2^63). */
static bool memory_max_at(const char *dir, bool v2, long double *bytes)
{
    char file[2 * PATH_MAX + 32];
    snprintf(file, sizeof file, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
    FILE *f = fopen(file, "re");
    if (!f)
        return false;
    unsigned long long v = 0;
    bool ok = fscanf(f, "%llu", &v) == 1;       /* v2's "max" does not scan */
    fclose(f);
    if (!ok || v == 0 || v >= 1ull << 62)
        return false;
    *bytes = (long double)v;                    /* exact: a 64-bit mantissa or more */
    return true;
}

/* The smallest limit that read() finds over the controller's cgroup of the
 * process and its ancestors under the mount; 0 for none. */
static long double smallest_limit(const char *mountinfo, const char *cgroup,
                                  const char *controller,
                                  bool (*read)(const char *dir, bool v2, long double *value))
{
    struct cg_mount m;
    char path[PATH_MAX];
    if (!find_mount(mountinfo, controller, &m) ||
        !find_cgroup(cgroup, &m, controller, path, sizeof path))
        return 0;
    /* The path under the mount: past its root; outside that root (another
     * cgroup namespace's view) only the mount point itself is visible. */
    size_t rn = strcmp(m.root, "/") == 0 ? 0 : strlen(m.root);
    const char *rel = "";
    if (strncmp(path, m.root, rn) == 0 && (path[rn] == '/' || path[rn] == '\0') &&
        !strstr(path, "/.."))           /* "/../x": moved out of its namespace */
        rel = path + rn;
    char dir[2 * PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s%s", m.point, strcmp(rel, "/") == 0 ? "" : rel) >=
        (int)sizeof dir)
        return 0;
    size_t top = strlen(m.point);
    long double best = 0;
    for (;;) {
        long double v;
        if (read(dir, m.v2, &v) && (best == 0 || v < best))
            best = v;
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= top || !slash || (size_t)(slash - dir) < top)
            break;
        *slash = '\0';
    }
    return best;
}

unsigned srv_cpu_quota(const char *mountinfo, const char *cgroup)
{
    long double best = smallest_limit(mountinfo, cgroup, "cpu", cpu_quota_at);
    if (best == 0)
        return 0;
    long double up = best > CPUS_MAX ? CPUS_MAX : best;
    unsigned n = (unsigned)up;
    return n < up || n == 0 ? n + 1 : n;
}

unsigned long long srv_memory_limit(const char *mountinfo, const char *cgroup)
{
    return (unsigned long long)smallest_limit(mountinfo, cgroup, "memory", memory_max_at);
}

void srv_resources_read(struct srv_resources *out)
{
    static const char mountinfo[] = "/proc/self/mountinfo", cgroup[] = "/proc/self/cgroup";
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    out->online = n < 1 ? 1u : n > (long)CPUS_MAX ? CPUS_MAX : (unsigned)n;
    out->affinity = uv_available_parallelism();    /* the affinity mask */
    out->cpu_quota = srv_cpu_quota(mountinfo, cgroup);
    unsigned c = out->online;
    if (out->affinity && out->affinity < c)
        c = out->affinity;
    if (out->cpu_quota && out->cpu_quota < c)
        c = out->cpu_quota;
    out->cpus = c;
    out->memory_limit = srv_memory_limit(mountinfo, cgroup);
}
