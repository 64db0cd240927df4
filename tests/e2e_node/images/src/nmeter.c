/* nmeter stand-in for the e2e busybox: Debian's busybox has no nmeter, and the node
 * conformance's Containers Lifecycle specs take the time with milliseconds from
 * `nmeter -d0 '%3t' | head -n1`. This prints the UTC time as HH:MM:SS.mmm, one line per
 * -d milliseconds (0: at once), until its reader goes. Other formats are not emulated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long delay_ms = 1000;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "-d", 2) == 0)
            delay_ms = atol(argv[i][2] ? argv[i] + 2 : (i + 1 < argc ? argv[++i] : "1000"));
    }
    for (;;) {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        if (printf("%02d:%02d:%02d.%03ld\n", tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000) < 0 ||
            fflush(stdout) != 0)
            return 0;
        if (delay_ms > 0)
            usleep((useconds_t)delay_ms * 1000);
    }
}
