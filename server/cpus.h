/*
 * server/cpus.h — how many CPUs this process may use (server/cpus.c): the
 * online ones, its affinity mask and its cgroup's CPU quota.
 */
#ifndef ATTND_SERVER_CPUS_H
#define ATTND_SERVER_CPUS_H

struct srv_cpus {
    unsigned online;            /* CPUs online */
    unsigned affinity;          /* CPUs in the affinity mask */
    unsigned quota;             /* the cgroup CPU quota rounded up, 0: none */
    unsigned count;             /* the smallest of them (no quota: of two), 1..256 */
};

/* Reads this process's CPUs (/proc/self/mountinfo, /proc/self/cgroup). */
void srv_cpus_read(struct srv_cpus *out);

/* The CPU quota of the process whose mount table and cgroup membership are
 * the files `mountinfo` and `cgroup` (their /proc/self formats): cgroup v1's
 * cpu.cfs_quota_us / cpu.cfs_period_us or cgroup v2's cpu.max, the smallest
 * over its cgroup and the ancestors visible in the mount, rounded up; 0 for
 * none or unreadable. */
unsigned srv_cpus_quota(const char *mountinfo, const char *cgroup);

#endif
