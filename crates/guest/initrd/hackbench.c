/*
 * exitlab's Linux workload: a hackbench-style messaging load that runs as /init of an
 * initramfs, prints its result on the console and ends the VM.
 *
 * Like hackbench (and `perf bench sched messaging`): GROUPS groups of FDS sender and FDS
 * receiver processes; every sender writes LOOPS messages of 100 bytes to every receiver
 * of its group, through a Unix socket pair (HB_MODE=socket, the default) or a pipe
 * (HB_MODE=pipe) per receiver. The time from releasing all senders at once to the last
 * receiver having read everything is the result. The load is scheduler- and IPI-heavy on
 * several vCPUs, which is what the IPI-virtualization seed measures with it.
 *
 * Parameters come from the kernel command line: Linux hands unknown `NAME=value`
 * parameters to init as environment variables (HB_GROUPS, HB_FDS, HB_LOOPS, HB_MODE).
 *
 * The VM is ended by writing the result code to QEMU's isa-debug-exit port (0xF4), which
 * exitlab's platform also has: 0 when every process finished its share, 1 otherwise.
 * Should that port be missing, the kernel is asked to power off.
 *
 * HB_LOCAL=1 makes it an ordinary program that just exits with the code, for trying it
 * on a host: never run it there without, as root it would power the host off.
 *
 * Output lines start with "exitlab-hackbench:" so that a host can find them among the
 * kernel's messages. Built static (glibc) by crates/guest/build.rs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define MSG_SIZE 100
#define DEBUG_EXIT_PORT 0xf4
#define MAX_FDS 64
#define MAX_GROUPS 64

static void finish(int code)
{
	const char *local = getenv("HB_LOCAL");

	fflush(stdout);
	/*
	 * The console driver sends the bytes later, from its interrupt handler (maybe on
	 * another vCPU): wait until they are out, or the result line can be cut off when
	 * the VM ends (seen with two vCPUs). Not a terminal (HB_LOCAL runs): nothing to do.
	 */
	tcdrain(STDOUT_FILENO);
	if (local && strcmp(local, "1") == 0)
		exit(code);
	if (ioperm(DEBUG_EXIT_PORT, 1, 1) == 0)
		outb((unsigned char)code, DEBUG_EXIT_PORT);
	sync();
	reboot(RB_POWER_OFF);
	/* init must not exit: wait for the end. */
	for (;;)
		pause();
}

static void fail(const char *what)
{
	printf("exitlab-hackbench: error: %s: %s\n", what, strerror(errno));
	finish(1);
}

static long param(const char *name, long def, long lo, long hi)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s)
		return def;
	v = strtol(s, &end, 10);
	if (*end || v < lo || v > hi) {
		printf("exitlab-hackbench: error: %s=%s is not a number in %ld..%ld\n", name, s,
		       lo, hi);
		finish(1);
	}
	return v;
}

/* Writes or reads exactly `len` bytes; 0 on success. */
static int xfer(int fd, char *buf, size_t len, int writing)
{
	while (len) {
		ssize_t n = writing ? write(fd, buf, len) : read(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Blocks until the parent closes the start pipe. */
static void wait_start(int start_fd)
{
	char c;

	while (read(start_fd, &c, 1) < 0 && errno == EINTR)
		;
}

static void sender(int start_fd, const int *out, int fds, long loops)
{
	char msg[MSG_SIZE];

	memset(msg, 'x', sizeof(msg));
	wait_start(start_fd);
	for (long i = 0; i < loops; i++)
		for (int j = 0; j < fds; j++)
			if (xfer(out[j], msg, sizeof(msg), 1))
				_exit(1);
	_exit(0);
}

static void receiver(int start_fd, int in, long messages)
{
	char msg[MSG_SIZE];

	wait_start(start_fd);
	for (long i = 0; i < messages; i++)
		if (xfer(in, msg, sizeof(msg), 0))
			_exit(1);
	_exit(0);
}

static int channel(int socket_mode, int fd[2])
{
	return socket_mode ? socketpair(AF_UNIX, SOCK_STREAM, 0, fd) : pipe(fd);
}

int main(void)
{
	long groups = param("HB_GROUPS", 2, 1, MAX_GROUPS);
	long fds = param("HB_FDS", 5, 1, MAX_FDS);
	long loops = param("HB_LOOPS", 100, 1, 1000000);
	const char *mode = getenv("HB_MODE");
	int socket_mode = !(mode && strcmp(mode, "pipe") == 0);
	int start[2];
	long children = 0, failed = 0;
	struct timespec t0, t1;
	cpu_set_t cpus;

	setvbuf(stdout, NULL, _IOLBF, 0);
	CPU_ZERO(&cpus);
	sched_getaffinity(0, sizeof(cpus), &cpus);
	printf("exitlab-hackbench: start mode=%s groups=%ld fds=%ld loops=%ld cpus=%d\n",
	       socket_mode ? "socket" : "pipe", groups, fds, loops, CPU_COUNT(&cpus));
	if (pipe(start))
		fail("pipe");
	for (long g = 0; g < groups; g++) {
		int wr[MAX_FDS];

		for (long r = 0; r < fds; r++) {
			int ch[2];
			pid_t pid;

			if (channel(socket_mode, ch))
				fail("socketpair/pipe");
			pid = fork();
			if (pid < 0)
				fail("fork");
			if (pid == 0) {
				close(start[1]);
				close(ch[1]);
				receiver(start[0], ch[0], fds * loops);
			}
			children++;
			close(ch[0]);
			wr[r] = ch[1];
		}
		for (long s = 0; s < fds; s++) {
			pid_t pid = fork();

			if (pid < 0)
				fail("fork");
			if (pid == 0) {
				close(start[1]);
				sender(start[0], wr, (int)fds, loops);
			}
			children++;
		}
		for (long r = 0; r < fds; r++)
			close(wr[r]);
	}
	close(start[0]);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	close(start[1]); /* releases every process at once */
	for (long i = 0; i < children; i++) {
		int status;

		if (wait(&status) < 0) {
			if (errno == EINTR) {
				i--;
				continue;
			}
			fail("wait");
		}
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed++;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("exitlab-hackbench: messages=%ld time=%.6f s failed=%ld\n",
	       groups * fds * fds * loops,
	       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9, failed);
	finish(failed ? 1 : 0);
	return 0;
}
