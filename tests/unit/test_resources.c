/*
 * tests/unit/test_resources.c — server/resources.c's reading of what a
 * process may use: the cgroup CPU quota and memory limit read from made-up
 * /proc/self/mountinfo and /proc/self/cgroup files over a made-up cgroup
 * tree in a temporary directory (cgroup v1 and v2, nested cgroups, a mount
 * whose root is not "/", another namespace's view, escaped mount points,
 * fractions rounded up, v1's "unlimited"), and this process's own CPU
 * count against its affinity mask.
 *
 * server/ objects are not linked into unit tests (only core/ is), so the
 * file under test is compiled in here; it needs only its header and libuv.
 */
#include "server/resources.c"

#include <sched.h>
#include <sys/stat.h>

#include "tests/harness.h"

static char base[64];                       /* the made-up tree's directory */
static char mi_path[96], cg_path[96];       /* its mountinfo and cgroup files */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* mkdir -p base/rel, and base/rel/name holding text (name NULL: none). */
static void put(const char *rel, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", base, rel);
    for (char *p = path + strlen(base) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0700);
            *p = '/';
        }
    mkdir(path, 0700);
    if (name) {
        char file[600];
        snprintf(file, sizeof file, "%s/%s", path, name);
        write_file(file, text);
    }
}

/* A fresh tree with mountinfo lines (each "@" stands for base) and
 * /proc/self/cgroup text. */
static void tree(const char *mountinfo, const char *cgroup)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", base, base);
    CHECK(system(cmd) == 0);
    char mi[2048];
    size_t n = 0;
    for (const char *p = mountinfo; *p && n + sizeof base < sizeof mi; p++) {
        if (*p == '@')
            n += (size_t)snprintf(mi + n, sizeof mi - n, "%s", base);
        else
            mi[n++] = *p;
    }
    mi[n] = '\0';
    snprintf(mi_path, sizeof mi_path, "%s.mountinfo", base);
    snprintf(cg_path, sizeof cg_path, "%s.cgroup", base);
    write_file(mi_path, mi);
    write_file(cg_path, cgroup);
}

static unsigned quota(void)
{
    return srv_cpu_quota(mi_path, cg_path);
}

#define V1_MOUNTS                                                             \
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"     \
    "32 31 0:29 / @/cpu rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"        \
    "33 31 0:30 / @/memory rw,relatime - cgroup cgroup rw,memory\n"

TEST(v1_quota_of_the_cgroup_and_its_parents)
{
    tree(V1_MOUNTS, "9:name=systemd:/kube\n5:memory:/x\n4:cpu,cpuacct:/kube/pod1/c1\n0::/\n");
    CHECK_EQ_INT((int)quota(), 0);          /* no files: no quota */
    put("cpu/kube/pod1/c1", "cpu.cfs_quota_us", "-1\n");
    put("cpu/kube/pod1/c1", "cpu.cfs_period_us", "100000\n");
    CHECK_EQ_INT((int)quota(), 0);          /* -1: none */
    put("cpu/kube/pod1/c1", "cpu.cfs_quota_us", "200000\n");
    CHECK_EQ_INT((int)quota(), 2);
    put("cpu/kube/pod1/c1", "cpu.cfs_quota_us", "250000\n");
    CHECK_EQ_INT((int)quota(), 3);          /* 2.5 rounded up */
    put("cpu/kube/pod1", "cpu.cfs_quota_us", "50000\n");
    put("cpu/kube/pod1", "cpu.cfs_period_us", "100000\n");
    CHECK_EQ_INT((int)quota(), 1);          /* the parent's 0.5 binds */
    put("cpu", "cpu.cfs_quota_us", "25000\n");
    put("cpu", "cpu.cfs_period_us", "100000\n");
    CHECK_EQ_INT((int)quota(), 1);          /* the mount point's 0.25, up to 1 */
    put("memory/x", "cpu.cfs_quota_us", "1\n");     /* another controller: unread */
    CHECK_EQ_INT((int)quota(), 1);
}

TEST(v1_mount_rooted_below_the_hierarchy)
{
    /* A container without a cgroup namespace: the mount's root is its own
     * cgroup, and /proc/self/cgroup names it in full. */
    tree("40 31 0:29 /docker/abc @/cpu rw - cgroup cgroup rw,cpu,cpuacct\n",
         "4:cpu,cpuacct:/docker/abc\n");
    put("cpu", "cpu.cfs_quota_us", "150000\n");
    put("cpu", "cpu.cfs_period_us", "100000\n");
    CHECK_EQ_INT((int)quota(), 2);
    /* A path outside the mount's root: only the mount point is visible. */
    tree("40 31 0:29 /docker/abc @/cpu rw - cgroup cgroup rw,cpu\n", "4:cpu:/elsewhere\n");
    put("cpu", "cpu.cfs_quota_us", "400000\n");
    put("cpu", "cpu.cfs_period_us", "100000\n");
    CHECK_EQ_INT((int)quota(), 4);
}

TEST(v2_cpu_max)
{
    tree("30 23 0:26 / @/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
         "0::/system.slice/attnd.service\n");
    put("unified/system.slice/attnd.service", "cpu.max", "max 100000\n");
    CHECK_EQ_INT((int)quota(), 0);
    put("unified/system.slice/attnd.service", "cpu.max", "300000 100000\n");
    CHECK_EQ_INT((int)quota(), 3);
    put("unified/system.slice", "cpu.max", "120000 100000\n");
    CHECK_EQ_INT((int)quota(), 2);          /* 1.2 rounded up */
    put("unified/system.slice", "cpu.max", "garbage 100000\n");
    CHECK_EQ_INT((int)quota(), 3);          /* unreadable: as none */
    /* a cgroup namespace's view: "0::/" and the mount point is the cgroup */
    tree("30 23 0:26 / @/fs rw - cgroup2 cgroup2 rw\n", "0::/\n");
    put("fs", "cpu.max", "50000 100000\n");
    CHECK_EQ_INT((int)quota(), 1);
    /* moved out of its namespace's cgroup: only the mount point is read */
    tree("30 23 0:26 / @/fs rw - cgroup2 cgroup2 rw\n", "0::/../sibling\n");
    put("fs", "cpu.max", "200000 100000\n");
    put("sibling", "cpu.max", "100000 100000\n");   /* what "fs/../sibling" would reach */
    CHECK_EQ_INT((int)quota(), 2);
    /* a cgroup2 mount rooted below the hierarchy, and a second one: the
     * first is read (neither is /sys/fs/cgroup, which would come first) */
    tree("30 23 0:26 /pod @/a rw - cgroup2 cgroup2 rw\n"
         "31 23 0:26 / @/b rw - cgroup2 cgroup2 rw\n", "0::/pod/c\n");
    put("a/c", "cpu.max", "100000 100000\n");
    put("b/pod/c", "cpu.max", "400000 100000\n");
    CHECK_EQ_INT((int)quota(), 1);
}

TEST(hybrid_takes_v1_cpu_and_escapes_are_undone)
{
    /* Both hierarchies mounted, the unified one first: the cpu controller
     * is v1's, and v2's cpu.max (if any) is not the one in force. */
    tree("30 23 0:26 / @/unified rw - cgroup2 cgroup2 rw\n"
         "32 31 0:29 / @/c\\040pu rw - cgroup cgroup rw,cpu\n",
         "1:cpu:/a\n0::/a\n");
    put("unified/a", "cpu.max", "100000 100000\n");
    put("c pu/a", "cpu.cfs_quota_us", "300000\n");
    put("c pu/a", "cpu.cfs_period_us", "100000\n");
    CHECK_EQ_INT((int)quota(), 3);
}

static unsigned long long memory(void)
{
    return srv_memory_limit(mi_path, cg_path);
}

TEST(memory_limit_v1_and_v2)
{
    tree(V1_MOUNTS, "5:memory:/pod/c\n4:cpu,cpuacct:/pod/c\n");
    CHECK(memory() == 0);
    put("memory/pod/c", "memory.limit_in_bytes", "9223372036854771712\n");  /* none */
    CHECK(memory() == 0);
    put("memory/pod/c", "memory.limit_in_bytes", "2147483648\n");
    CHECK(memory() == 2147483648ull);
    put("memory/pod", "memory.limit_in_bytes", "1073741824\n");
    CHECK(memory() == 1073741824ull);     /* the parent's binds */
    put("cpu/pod/c", "memory.limit_in_bytes", "4096\n");  /* the cpu controller's: unread */
    CHECK(memory() == 1073741824ull);
    tree("30 23 0:26 / @/unified rw - cgroup2 cgroup2 rw\n", "0::/a/b\n");
    put("unified/a/b", "memory.max", "max\n");
    CHECK(memory() == 0);
    put("unified/a/b", "memory.max", "536870912\n");
    CHECK(memory() == 536870912ull);
    put("unified/a", "memory.max", "max\n");
    CHECK(memory() == 536870912ull);
}

TEST(no_cgroup_files_no_quota)
{
    CHECK_EQ_INT((int)srv_cpu_quota("/nonexistent/mountinfo", "/nonexistent/cgroup"), 0);
    tree("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n", "0::/\n");
    CHECK_EQ_INT((int)quota(), 0);          /* no cgroup mount */
    CHECK(memory() == 0);
}

TEST(this_process_count_is_within_its_affinity)
{
    struct srv_resources c;
    srv_resources_read(&c);
    cpu_set_t set;
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
    CHECK_EQ_INT((int)c.affinity, CPU_COUNT(&set));
    CHECK(c.cpus >= 1 && c.cpus <= c.online && c.cpus <= c.affinity);
    CHECK(c.cpu_quota == 0 || c.cpus <= c.cpu_quota);
    CHECK(c.memory_limit == srv_memory_limit("/proc/self/mountinfo", "/proc/self/cgroup"));
    if (CPU_COUNT(&set) >= 2) {             /* one CPU of them: a count of 1 */
        cpu_set_t one;
        CPU_ZERO(&one);
        for (int i = 0; i < CPU_SETSIZE; i++)
            if (CPU_ISSET(i, &set)) {
                CPU_SET(i, &one);
                break;
            }
        CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
        struct srv_resources c1;
        srv_resources_read(&c1);
        CHECK_EQ_INT((int)c1.cpus, 1);
        CHECK_EQ_INT((int)c1.affinity, 1);
        CHECK(sched_setaffinity(0, sizeof set, &set) == 0);
    }
}

int main(void)
{
    snprintf(base, sizeof base, "/tmp/attnd-resources-%ld", (long)getpid());
    RUN(v1_quota_of_the_cgroup_and_its_parents);
    RUN(v1_mount_rooted_below_the_hierarchy);
    RUN(v2_cpu_max);
    RUN(hybrid_takes_v1_cpu_and_escapes_are_undone);
    RUN(memory_limit_v1_and_v2);
    RUN(no_cgroup_files_no_quota);
    RUN(this_process_count_is_within_its_affinity);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s.mountinfo %s.cgroup", base, base, base);
    if (system(cmd) != 0)
        printf("  (could not remove %s)\n", base);
    TEST_MAIN_END();
}
