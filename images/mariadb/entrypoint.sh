#!/bin/sh
# Entrypoint of localhost/kubeslurm/mariadb: the subset of the official `mariadb`
# image's entrypoint that kubeslurm's MariaDB StatefulSet relies on (contract:
# operator/kubeslurm/render/database/statefulset.py).
#
#   kubeslurm-mariadb-entrypoint [--mariadbd-option...]   # runs mariadbd with them
#   kubeslurm-mariadb-entrypoint mariadbd [--option...]   # the same
#   kubeslurm-mariadb-entrypoint COMMAND...               # runs COMMAND (e.g. sh)
#
# On a data directory without a database (an empty PVC; a lost+found is fine) it
# first initialises one: it unpacks the system tables the image made at build time
# (setup.sh) and creates the database and user in one bootstrap run, so nothing can
# connect before they exist (slurmdbd 24.11 with trixie's libmariadb crashes in
# _check_mysql_concat_is_sane if it has to create StorageLoc itself):
#   MARIADB_DATABASE              database to create (optional)
#   MARIADB_USER, MARIADB_PASSWORD  user created @'%' and @'localhost' with ALL on
#                                 MARIADB_DATABASE (both or neither)
#   MARIADB_PASSWORD_FILE         a file holding MARIADB_PASSWORD (what kubeslurm
#                                 uses: an environment variable would be inherited
#                                 by mariadbd); its trailing newlines are dropped
#   MARIADB_RANDOM_ROOT_PASSWORD  non-empty: root@localhost gets a random password
#                                 that is never printed (root can still log in
#                                 through the socket as the container's OS root)
#   MARIADB_ROOT_PASSWORD         root@localhost gets this password (plus socket);
#                                 or MARIADB_ROOT_PASSWORD_FILE, as above
# Without either, root@localhost authenticates by unix socket only. The variables
# are read only on that first start: an existing database keeps its users.
#
# Started as root it takes ownership of the data directory and mariadbd drops to
# user mysql itself (--user=mysql); started as another user it runs as that user.
# Options are read with the `--name=value` spelling (--datadir=, --socket=).
#
# Unless TLS is configured (--ssl*/--tls* options, as arguments or in a config
# file), mariadbd serves TLS with an EC key and self-signed certificate made on the
# first start and kept in the data directory (kubeslurm-tls-*.pem).
set -eu

log() { printf "kubeslurm-mariadb-entrypoint: %s\n" "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
    set -- mariadbd "$@"
fi
case "$1" in
    mariadbd|mysqld|/usr/sbin/mariadbd|/usr/sbin/mysqld) shift ;;
    *) exec "$@" ;;
esac

datadir=/var/lib/mysql
socket=/run/mysqld/mysqld.sock
# The system tables of a new database, made at build time (images/mariadb/setup.sh).
datadir_template=/usr/share/kubeslurm-mariadb/datadir-template.tar.zst
for arg in "$@"; do
    case "$arg" in
        --datadir=*) datadir=${arg#--datadir=} ;;
        --socket=*) socket=${arg#--socket=} ;;
    esac
done

user_opt=
root_auth=normal
if [ "$(id -u)" = 0 ]; then
    user_opt=--user=mysql
    root_auth=socket
    mkdir -p "$datadir" "$(dirname "$socket")"
    # A fresh PVC is root-owned; files restored from elsewhere may have other owners.
    chown mysql:mysql "$datadir" "$(dirname "$socket")"
    find "$datadir" -xdev ! -user mysql -exec chown mysql:mysql {} + 2>/dev/null || true
fi

# SQL string literal / identifier quoting (the default sql_mode treats \ as escape).
sql_string() {
    printf "'%s'" "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e "s/'/\\\\'/g")"
}
sql_ident() {
    printf '`%s`' "$(printf '%s' "$1" | sed -e 's/`/``/g')"
}

# printf, not echo: dash's echo would turn the \\ of an escaped password into \.
line() { printf '%s\n' "$*"; }

# The content of a *_FILE variable's file, as the official image's entrypoint reads it
# (trailing newlines dropped). The caller keeps it in a shell variable that is never
# exported, so mariadbd inherits no password.
secret_file() {
    [ -r "$2" ] || die "$1 names $2, which is not a readable file"
    content=$(cat "$2") || die "reading $1 ($2) failed"
    [ -n "$content" ] || die "$1 names $2, which is empty"
    printf '%s' "$content"
}

bootstrap_sql() {
    line "SET @@SESSION.SQL_LOG_BIN=0;"
    # --bootstrap runs with the grant tables off: CREATE USER and GRANT need them loaded.
    line "FLUSH PRIVILEGES;"
    # No anonymous users, no root over TCP: only root@localhost and the
    # mariadb.sys/mysql service accounts of the template's mariadb-install-db remain.
    line "DELETE FROM mysql.global_priv WHERE User='' OR (User='root' AND Host NOT IN ('localhost'));"
    if [ -n "${MARIADB_DATABASE:-}" ]; then
        line "CREATE DATABASE IF NOT EXISTS $(sql_ident "$MARIADB_DATABASE");"
    fi
    if [ -n "${MARIADB_USER:-}" ]; then
        for host in % localhost; do
            line "CREATE USER $(sql_string "$MARIADB_USER")@'$host' IDENTIFIED BY $(sql_string "$MARIADB_PASSWORD");"
            if [ -n "${MARIADB_DATABASE:-}" ]; then
                line "GRANT ALL ON $(sql_ident "$MARIADB_DATABASE").* TO $(sql_string "$MARIADB_USER")@'$host';"
            fi
        done
    fi
    root_password=
    if [ -n "${MARIADB_ROOT_PASSWORD:-}" ]; then
        root_password=$MARIADB_ROOT_PASSWORD
    elif [ -n "${MARIADB_RANDOM_ROOT_PASSWORD:-}" ]; then
        root_password=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
    fi
    if [ -n "$root_password" ]; then
        line "ALTER USER root@localhost IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD($(sql_string "$root_password"));"
    elif [ "$root_auth" = normal ]; then
        # Not root: the bootstrap used an empty root password; lock that door.
        line "ALTER USER root@localhost IDENTIFIED VIA unix_socket;"
    fi
    line "FLUSH PRIVILEGES;"
}

initialise() {
    if [ -n "${MARIADB_PASSWORD_FILE:-}" ]; then
        [ -z "${MARIADB_PASSWORD:-}" ] || die "both MARIADB_PASSWORD and MARIADB_PASSWORD_FILE are set; set one"
        unset MARIADB_PASSWORD  # an exported empty one would pass the value on to mariadbd
        MARIADB_PASSWORD=$(secret_file MARIADB_PASSWORD_FILE "$MARIADB_PASSWORD_FILE")
    fi
    if [ -n "${MARIADB_ROOT_PASSWORD_FILE:-}" ]; then
        [ -z "${MARIADB_ROOT_PASSWORD:-}" ] || die "both MARIADB_ROOT_PASSWORD and MARIADB_ROOT_PASSWORD_FILE are set; set one"
        unset MARIADB_ROOT_PASSWORD
        MARIADB_ROOT_PASSWORD=$(secret_file MARIADB_ROOT_PASSWORD_FILE "$MARIADB_ROOT_PASSWORD_FILE")
    fi
    if [ -n "${MARIADB_USER:-}" ] && [ -z "${MARIADB_PASSWORD:-}" ]; then
        die "MARIADB_USER is set but MARIADB_PASSWORD is empty; set both (or neither)"
    fi
    if [ -n "${MARIADB_PASSWORD:-}" ] && [ -z "${MARIADB_USER:-}" ]; then
        die "MARIADB_PASSWORD is set but MARIADB_USER is empty; set both (or neither)"
    fi
    log "initialising a new database in $datadir"
    [ -r "$datadir_template" ] || die "the image has no data directory template $datadir_template (images/mariadb/setup.sh makes it)"
    : > "$datadir/.kubeslurm-initialising"
    # The system tables come from the image (setup.sh: mariadb-install-db at build
    # time; at each first start it was on the critical path of a new cluster). The
    # database and user are made by one bootstrap run of mariadbd on them: no server
    # ever listens, on TCP or the socket, before they exist, and no second server has
    # to start and stop first. Bootstrap mode skips the grant tables until FLUSH
    # PRIVILEGES. The SQL holds the password: root-only (umask 077), in a private
    # directory of the container's own /tmp, removed before mariadbd starts; it
    # reaches mariadbd on its standard input.
    # As root, tar keeps the archive's owner (mysql); as another user, the files are that user's.
    if ! out=$(tar -C "$datadir" --zstd --no-overwrite-dir -xf "$datadir_template" 2>&1); then
        printf "%s\n" "$out" >&2
        die "unpacking the data directory template $datadir_template into $datadir failed (output above)"
    fi
    sql_dir=$(mktemp -d "${TMPDIR:-/tmp}/kubeslurm-mariadb-init.XXXXXX") || die "mktemp failed"
    trap 'rm -rf "$sql_dir"' EXIT
    (umask 077; bootstrap_sql > "$sql_dir/init.sql") || die "writing $sql_dir/init.sql failed"
    # shellcheck disable=SC2086
    if ! out=$(mariadbd $user_opt --datadir="$datadir" --bootstrap "$@" < "$sql_dir/init.sql" 2>&1); then
        printf "%s\n" "$out" >&2
        die "mariadbd --bootstrap failed creating the database or the user (output above)"
    fi
    rm -rf "$sql_dir"
    trap - EXIT
    rm -f "$datadir/.kubeslurm-initialising"
    log "database initialised${MARIADB_DATABASE:+: $MARIADB_DATABASE}${MARIADB_USER:+, user $MARIADB_USER}"
}

if [ -e "$datadir/.kubeslurm-initialising" ]; then
    # Nothing can have used a database whose initialisation did not finish: TCP
    # was off. Start over rather than run half a database.
    log "a previous initialisation of $datadir did not finish; starting it again"
    find "$datadir" -mindepth 1 -maxdepth 1 ! -name lost+found ! -name .kubeslurm-initialising \
        -exec rm -rf {} +
fi
if [ ! -d "$datadir/mysql" ]; then
    initialise "$@"
fi

# TLS. Without a certificate configured, MariaDB 11.4+ makes a new self-signed RSA
# one at every start: 0.2 s of CPU here, over a second while a new cluster's other
# pods start beside it, on its critical path (slurmdbd, slurmctld and every slurmd
# wait for this server). An EC P-256 key and certificate serve clients the same way
# (11.x clients check a self-signed certificate by its fingerprint and the
# password) and take milliseconds; made once, kept beside the data (mysql's, mode
# 0600) and made again before they expire. TLS options given as arguments or in a
# config file (my_print_defaults, as mariadbd reads them) are left alone.
tls_configured() {
    for arg in "$@" $(my_print_defaults --mysqld); do
        case "$arg" in --ssl*|--skip-ssl*|--disable-ssl*|--tls*) return 0 ;; esac
    done
    return 1
}
if ! tls_configured "$@"; then
    tls_key=$datadir/kubeslurm-tls-key.pem
    tls_cert=$datadir/kubeslurm-tls-cert.pem
    if ! openssl x509 -checkend 86400 -noout -in "$tls_cert" >/dev/null 2>&1 || [ ! -s "$tls_key" ]; then
        if ! out=$(umask 077; openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
                -subj "/CN=kubeslurm-mariadb" -keyout "$tls_key.new" -out "$tls_cert.new" 2>&1); then
            printf "%s\n" "$out" >&2
            die "making the server's TLS key and certificate with openssl failed (output above)"
        fi
        [ -z "$user_opt" ] || chown mysql:mysql "$tls_key.new" "$tls_cert.new"
        mv -f "$tls_key.new" "$tls_key"
        mv -f "$tls_cert.new" "$tls_cert"
        log "made the server's TLS key and certificate (EC P-256, 10 years): $tls_cert"
    fi
    set -- "$@" --ssl-key="$tls_key" --ssl-cert="$tls_cert"
fi

# shellcheck disable=SC2086
exec mariadbd $user_opt --datadir="$datadir" "$@"
