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

# The system tables of a new database, made once here instead of at every new
# cluster's first start: mariadb-install-db's run (0.5 s alone, 1.6-2.3 s while a
# new cluster's other pods start beside it) was on the critical path of
# `kubectl apply` -> every node idle. The entrypoint unpacks this archive into an
# empty data directory and adds the pod's own database, user and root password with
# one `mariadbd --bootstrap`. root@localhost authenticates by socket here; nothing
# else has an account. The files are mostly zeros (the redo log, the system and undo
# tablespaces): holes punched and archived sparse, the archive is under 1 MB and
# unpacks in well under 0.1 s.
template_build=$(mktemp -d)
chmod 0755 "$template_build"  # mariadbd runs as mysql
install -d -o mysql -g mysql -m 0750 "$template_build/data"
if ! mariadb-install-db --user=mysql --datadir="$template_build/data" --force --skip-name-resolve \
        --auth-root-authentication-method=socket --skip-test-db > "$template_build/install.log" 2>&1; then
    cat "$template_build/install.log" >&2
    echo "setup.sh: mariadb-install-db failed making the data directory template (output above)" >&2
    exit 1
fi
# Instance state a new server makes itself (the buffer pool's page list).
rm -f "$template_build/data/ib_buffer_pool"
find "$template_build/data" -maxdepth 1 -type f -size +1M -exec fallocate --dig-holes {} \;
install -d -m 0755 /usr/share/kubeslurm-mariadb
tar -C "$template_build/data" --sparse --zstd --numeric-owner -cf /usr/share/kubeslurm-mariadb/datadir-template.tar.zst .
chmod 0644 /usr/share/kubeslurm-mariadb/datadir-template.tar.zst
rm -rf "$template_build"

# Debian's 50-server.cnf binds to 127.0.0.1; in a pod the Service must reach it.
# Files in mariadb.conf.d are read in order, so 99- wins. The entrypoint's
# first initialisation (mariadbd --bootstrap) never listens.
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
