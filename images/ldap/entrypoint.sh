#!/bin/sh
# Entrypoint of localhost/kubeslurm/ldap: Debian's slapd (OpenLDAP) as a small
# site directory, for the tests and for sites without one.
#
#   kubeslurm-ldap-entrypoint [slapd [SLAPD-OPTION...]]   # runs slapd (the default)
#   kubeslurm-ldap-entrypoint COMMAND...                  # runs COMMAND (e.g. sh)
#
# slapd's configuration is generated at every start from the environment (cn=config
# in /run/slapd/slapd.d, never persisted), so the environment is the one source of
# truth; the data lives in /var/lib/ldap (mdb, a volume):
#   LDAP_SUFFIX                 the database's suffix, e.g. dc=example,dc=org (required)
#   LDAP_ADMIN_DN               its root DN (default cn=admin,<suffix>)
#   LDAP_ADMIN_PASSWORD_FILE    a file holding the root DN's password (trailing
#                               newlines dropped), stored as an {SSHA} hash. Without
#                               it the root DN has no password: administer through
#                               ldapi:/// as the container's root (SASL EXTERNAL).
#                               There is no LDAP_ADMIN_PASSWORD: slapd would inherit it.
#   LDAP_SEED_DIR               directory of *.ldif files loaded (slapadd, in name
#                               order) when the database is empty, never again
#                               (default /etc/ldap-seed). For a dc= suffix the suffix
#                               entry is created unless a seed file has it.
#   LDAP_TLS_DIR                directory with tls.crt and tls.key, and optionally
#                               ca.crt (a kubernetes.io/tls Secret; default
#                               /etc/ldap-tls). When both files are there, slapd also
#                               listens on ldaps:/// and offers StartTLS on ldap:///,
#                               and every operation except StartTLS itself needs a
#                               protected connection (TLS, or ldapi:///).
#   LDAP_URLS                   what slapd listens on, space-separated (default
#                               "ldap:/// ldapi:///", plus "ldaps:///" with TLS)
#   LDAP_DEBUG_LEVEL            slapd -d level (default 256: one line per operation)
#
# Started as root, it owns the data directory and slapd drops to openldap (-u/-g)
# after binding its ports; started as another user, it runs as that user (then
# listen on ports above 1023). Logs go to stderr. Every value from the environment
# is checked against a pattern before it reaches the generated LDIF, so no value can
# add an attribute or an entry; values reach programs as arguments, never through
# a shell command line.
set -eu

log() { printf 'kubeslurm-ldap-entrypoint: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
    set -- slapd "$@"
fi
case "$1" in
    slapd|/usr/sbin/slapd) shift ;;
    *) exec "$@" ;;
esac

newline='
'
# matches NAME VALUE ERE: VALUE is one line matching ERE in full.
matches() {
    case $2 in
        ""|*"$newline"*) return 1 ;;
    esac
    printf '%s\n' "$2" | grep -Eqx -- "$3"
}
require() {
    matches "$@" || die "$1 must match $3 (one line); got $(printf '%s' "$2" | head -c 200)"
}

# A DN of plain RDNs (attr=value, values of letters, digits, space . _ -): what
# suffixes and admin names look like, and nothing LDIF or a filter could misread.
RDN='[A-Za-z][A-Za-z0-9-]*=[A-Za-z0-9]([A-Za-z0-9 ._-]*[A-Za-z0-9])?'
DN="$RDN(,$RDN)*"
URL='ldapi:///|ldapi://%2F[A-Za-z0-9%._-]+/?|ldaps?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])?(:[0-9]{1,5})?/?'

confdir=/run/slapd/slapd.d
datadir=/var/lib/ldap
tlsrun=/run/slapd/tls
suffix=${LDAP_SUFFIX:-}
[ -n "$suffix" ] || die "LDAP_SUFFIX is not set (e.g. dc=example,dc=org)"
require LDAP_SUFFIX "$suffix" "$DN"
admin_dn=${LDAP_ADMIN_DN:-cn=admin,$suffix}
require LDAP_ADMIN_DN "$admin_dn" "$DN"
seed_dir=${LDAP_SEED_DIR:-/etc/ldap-seed}
tls_dir=${LDAP_TLS_DIR:-/etc/ldap-tls}
debug_level=${LDAP_DEBUG_LEVEL:-256}
require LDAP_DEBUG_LEVEL "$debug_level" '[A-Za-z0-9]+'

tls=
if [ -f "$tls_dir/tls.crt" ] && [ -f "$tls_dir/tls.key" ]; then
    tls=1
elif [ -e "$tls_dir/tls.crt" ] || [ -e "$tls_dir/tls.key" ]; then
    die "$tls_dir has only one of tls.crt and tls.key; mount both (or neither)"
fi
urls=${LDAP_URLS:-ldap:/// ldapi:///${tls:+ ldaps:///}}
for url in $urls; do
    require "LDAP_URLS item" "$url" "$URL"
done

root=
owner=
if [ "$(id -u)" = 0 ]; then
    root=1
    owner=openldap:openldap
fi

# The root DN's password as an {SSHA} hash. slappasswd reads it from a file, so
# it never appears in an argument list; the copy without trailing newlines lives
# in a private directory only as long as slappasswd runs.
admin_hash=
if [ -n "${LDAP_ADMIN_PASSWORD_FILE:-}" ]; then
    [ -r "$LDAP_ADMIN_PASSWORD_FILE" ] || die "LDAP_ADMIN_PASSWORD_FILE names $LDAP_ADMIN_PASSWORD_FILE, which is not a readable file"
    password=$(cat "$LDAP_ADMIN_PASSWORD_FILE")
    [ -n "$password" ] || die "LDAP_ADMIN_PASSWORD_FILE names $LDAP_ADMIN_PASSWORD_FILE, which is empty"
    scratch=$(umask 077 && mktemp -d)
    (umask 077 && printf '%s' "$password" > "$scratch/password")
    unset password
    admin_hash=$(slappasswd -n -h '{SSHA}' -T "$scratch/password") || { rm -rf "$scratch"; die "slappasswd failed"; }
    rm -rf "$scratch"
    matches hash "$admin_hash" '\{SSHA\}[A-Za-z0-9+/=]+' || die "slappasswd printed no {SSHA} hash"
fi

rm -rf "$confdir" "$tlsrun"
mkdir -p "$confdir" "$datadir"
if [ -n "$tls" ]; then
    # Secret volumes are root-owned; slapd reads the key after dropping to openldap.
    install -d -m 0700 ${owner:+-o openldap -g openldap} "$tlsrun"
    install -m 0644 ${owner:+-o openldap -g openldap} "$tls_dir/tls.crt" "$tlsrun/tls.crt"
    install -m 0600 ${owner:+-o openldap -g openldap} "$tls_dir/tls.key" "$tlsrun/tls.key"
    if [ -f "$tls_dir/ca.crt" ]; then
        install -m 0644 ${owner:+-o openldap -g openldap} "$tls_dir/ca.crt" "$tlsrun/ca.crt"
    fi
fi

# The first RDN's value when the suffix is dc=...: the suffix entry's dc and o.
first_rdn=${suffix%%,*}
suffix_dc=
case $first_rdn in
    [Dd][Cc]=*) suffix_dc=${first_rdn#*=} ;;
esac

ROOT_BY_SOCKET='dn.exact=gidNumber=0+uidNumber=0,cn=peercred,cn=external,cn=auth'
config_ldif() {
    cat <<EOF
dn: cn=config
objectClass: olcGlobal
cn: config
olcPidFile: /run/slapd/slapd.pid
olcArgsFile: /run/slapd/slapd.args
olcToolThreads: 1
EOF
    if [ -n "$tls" ]; then
        printf '%s\n' "olcTLSCertificateFile: $tlsrun/tls.crt" \
            "olcTLSCertificateKeyFile: $tlsrun/tls.key" \
            "olcTLSProtocolMin: 3.3" \
            "olcSecurity: ssf=1"
        if [ -f "$tlsrun/ca.crt" ]; then
            printf '%s\n' "olcTLSCACertificateFile: $tlsrun/ca.crt"
        fi
    fi
    cat <<EOF

dn: cn=module{0},cn=config
objectClass: olcModuleList
cn: module{0}
olcModulePath: /usr/lib/ldap
olcModuleLoad: {0}back_mdb

dn: cn=schema,cn=config
objectClass: olcSchemaConfig
cn: schema

include: file:///etc/ldap/schema/core.ldif

include: file:///etc/ldap/schema/cosine.ldif

include: file:///etc/ldap/schema/nis.ldif

include: file:///etc/ldap/schema/inetorgperson.ldif

include: file:///etc/ldap/schema/openssh-lpk.ldif

dn: olcDatabase={-1}frontend,cn=config
objectClass: olcDatabaseConfig
objectClass: olcFrontendConfig
olcDatabase: {-1}frontend
olcSizeLimit: 500
olcAccess: {0}to * by $ROOT_BY_SOCKET manage by * break
olcAccess: {1}to dn.exact="" by * read
olcAccess: {2}to dn.base="cn=Subschema" by * read

dn: olcDatabase={0}config,cn=config
objectClass: olcDatabaseConfig
olcDatabase: {0}config
olcAccess: {0}to * by $ROOT_BY_SOCKET manage by * break

dn: olcDatabase={1}mdb,cn=config
objectClass: olcDatabaseConfig
objectClass: olcMdbConfig
olcDatabase: {1}mdb
olcDbDirectory: $datadir
olcSuffix: $suffix
olcRootDN: $admin_dn
EOF
    if [ -n "$admin_hash" ]; then
        printf '%s\n' "olcRootPW: $admin_hash"
    fi
    # The container's root (ldapi:///, SASL EXTERNAL) manages everything: a
    # database's own rules come before the frontend's, so it is said here too.
    # Users bind to prove a password and may change their own; every bound
    # identity (SSSD's service account among them) reads the rest; anonymous
    # clients read nothing.
    cat <<EOF
olcDbMaxSize: 1073741824
olcDbIndex: objectClass eq
olcDbIndex: uid,uidNumber,gidNumber,memberUid,cn eq
olcLastMod: TRUE
olcAccess: {0}to * by $ROOT_BY_SOCKET manage by * break
olcAccess: {1}to attrs=userPassword by self write by anonymous auth by * none
olcAccess: {2}to attrs=shadowLastChange by self write by users read by * none
olcAccess: {3}to * by users read by * none
EOF
}

config_ldif > /run/slapd/config.ldif
if ! out=$(slapadd -n 0 -F "$confdir" -l /run/slapd/config.ldif 2>&1); then
    printf '%s\n' "$out" >&2
    die "slapd's configuration was refused (output above)"
fi
rm -f /run/slapd/config.ldif

seed() {
    log "seeding a new database in $datadir (suffix $suffix)"
    : > "$datadir/.kubeslurm-initialising"
    if [ -n "$suffix_dc" ] && ! cat "$seed_dir"/*.ldif 2>/dev/null | grep -Fxiq -- "dn: $suffix"; then
        printf '%s\n' "dn: $suffix" "objectClass: top" "objectClass: dcObject" \
            "objectClass: organization" "dc: $suffix_dc" "o: $suffix_dc" \
            > /run/slapd/suffix.ldif
        slapadd -F "$confdir" -b "$suffix" -l /run/slapd/suffix.ldif >&2 || die "adding the suffix entry $suffix failed"
        rm -f /run/slapd/suffix.ldif
    fi
    for file in "$seed_dir"/*.ldif; do
        [ -f "$file" ] || continue
        slapadd -F "$confdir" -b "$suffix" -l "$file" >&2 || die "loading the seed file $file failed (slapadd's error above)"
        log "loaded $file"
    done
    rm -f "$datadir/.kubeslurm-initialising"
}

if [ -e "$datadir/.kubeslurm-initialising" ]; then
    # slapd never served a database whose seeding did not finish: start over.
    log "a previous seeding of $datadir did not finish; starting it again"
    find "$datadir" -mindepth 1 -maxdepth 1 ! -name lost+found ! -name .kubeslurm-initialising \
        -exec rm -rf {} +
fi
if [ ! -s "$datadir/data.mdb" ]; then
    seed
fi

if [ -n "$root" ]; then
    chown -R "$owner" "$confdir" /run/slapd
    # A fresh volume is root-owned, and slapadd ran as root.
    find "$datadir" -xdev ! -user openldap -exec chown "$owner" {} +
    exec slapd -F "$confdir" -h "$urls" -u openldap -g openldap -d "$debug_level" "$@"
fi
exec slapd -F "$confdir" -h "$urls" -d "$debug_level" "$@"
