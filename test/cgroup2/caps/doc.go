// Package caps proves, on the real kernel of the cgroup v2 VM (test/cgroup2,
// make test-cgroup2), why the agent's container holds each of the three
// capabilities the shipped securityContext adds (docs/security.md): the
// agent's own code runs in a child process whose capabilities are exactly
// what the container runtime gives it — uid 0, no_new_privs, bounding,
// permitted and effective sets equal to the shipped set — once with that set
// and once with the set minus one capability, and the test compares.
//
// The child is this test binary re-executed: it sets no_new_privs, drops
// every other capability from its bounding set and its permitted, effective,
// inheritable and ambient sets, and executes itself again as uid 0, as runc
// does before it starts the container's process (for uid 0 the kernel then
// gives permitted = effective = bounding). The re-executed child checks its
// own /proc/self/status before it runs the product's code.
package caps
