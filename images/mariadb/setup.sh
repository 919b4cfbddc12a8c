#!/bin/sh
# Steps that turn "Debian trixie + images/mariadb/packages.txt" into the MariaDB
# image. Run as root inside the image root by both images/mariadb/Dockerfile and
# images/build.py (the same script, so both builders make the same image). The
# image contract is the docstring of operator/kubeslurm/render/database/statefulset.py.
set -eu
here=$(dirname "$0")

install -m 0755 "$here/entrypoint.sh" /usr/local/bin/kubeslurm-mariadb-entrypoint

# mariadb-server's postinst initialised a database in /var/lib/mysql at build
# time (with the build's root account). The image must start empty so that the
# entrypoint initialises the pod's own database with the pod's credentials.
rm -rf /var/lib/mysql
install -d -o mysql -g mysql -m 0750 /var/lib/mysql
install -d -o mysql -g mysql -m 0755 /run/mysqld

# Debian's 50-server.cnf binds to 127.0.0.1; in a pod the Service must reach it.
# Files in mariadb.conf.d are read in order, so 99- wins. The entrypoint's
# first initialisation (mariadb-install-db, mariadbd --bootstrap) never listens.
# Pod IPs change, so names are not resolved (the grants use '%' anyway).
# No log_error is set anywhere: the log goes to stderr, the container log.
cat > /etc/mysql/mariadb.conf.d/99-kubeslurm.cnf <<'CNF'
# kubeslurm image defaults (images/mariadb/setup.sh)
[mariadbd]
bind-address = 0.0.0.0
port = 3306
skip-name-resolve
CNF
chmod 0644 /etc/mysql/mariadb.conf.d/99-kubeslurm.cnf

: > /etc/machine-id
