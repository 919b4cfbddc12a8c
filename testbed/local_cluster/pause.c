/* The pod sandbox's init: holds the pod's namespaces open, reaps orphaned
 * children (pods sharing one PID namespace re-parent to it) and exits on
 * SIGINT/SIGTERM. Written for kubeslurm's local cluster; behaves like the
 * upstream pause container. Built with `gcc -static -Os`. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) { _exit(0); }

static void on_child(int sig) {
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("kubeslurm-pause 1.0");
    return 0;
  }
  if (getpid() != 1)
    fprintf(stderr, "pause: warning: not PID 1\n");
  struct sigaction term = {.sa_handler = on_term};
  struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &term, NULL) < 0 || sigaction(SIGTERM, &term, NULL) < 0 ||
      sigaction(SIGCHLD, &child, NULL) < 0) {
    perror("pause: sigaction");
    return 1;
  }
  for (;;)
    pause();
}
