/*
 * server/resources.h — what this process may use of the machine
 * (server/resources.c): its CPUs (online, affinity mask, cgroup CPU quota)
 * and its cgroup's memory limit.
 */
#ifndef ATTND_SERVER_RESOURCES_H
#define ATTND_SERVER_RESOURCES_H

struct srv_resources {
    unsigned online;            /* CPUs online */
    unsigned affinity;          /* CPUs in the affinity mask */
    unsigned cpu_quota;         /* the cgroup CPU quota rounded up, 0: none */
    unsigned cpus;              /* the smallest of them (no quota: of two), 1..256 */
    unsigned long long memory_limit;    /* the cgroup's, in bytes, 0: none */
};

/* Reads this process's resources (/proc/self/mountinfo, /proc/self/cgroup). */
void srv_resources_read(struct srv_resources *out);

/* The limits of the process whose mount table and cgroup membership are
 * the files `mountinfo` and `cgroup` (their /proc/self formats; tests give
 * their own), each the smallest over its cgroup and the ancestors visible
 * in the mount, 0 for none or unreadable:
 * the CPU quota rounded up (cgroup v1's cpu.cfs_quota_us / cpu.cfs_period_us,
 * v2's cpu.max), and the memory limit in bytes (v1's memory.limit_in_bytes,
 * v2's memory.max). */
unsigned srv_cpu_quota(const char *mountinfo, const char *cgroup);
unsigned long long srv_memory_limit(const char *mountinfo, const char *cgroup);

#endif
