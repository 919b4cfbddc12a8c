#!/bin/sh
# Steps that turn "Debian trixie + images/ldap/packages.txt" into the directory
# image. Run as root inside the image root by both images/ldap/Dockerfile and
# images/build.py (the same script, so both builders make the same image). The
# image contract is the header of images/ldap/entrypoint.sh.
set -eu
here=$(dirname "$0")

install -m 0755 "$here/entrypoint.sh" /usr/local/bin/kubeslurm-ldap-entrypoint
# Next to Debian's schemas, where site admins look for them.
install -m 0644 "$here/openssh-lpk.ldif" /etc/ldap/schema/openssh-lpk.ldif

# slapd's postinst created a configuration and a database (dc=nodomain, with the
# build's admin password) at build time. The image must start empty: the
# entrypoint writes the configuration from the pod's environment at every start
# and seeds the pod's own database.
rm -rf /var/lib/ldap /etc/ldap/slapd.d
install -d -o openldap -g openldap -m 0750 /var/lib/ldap
install -d -o openldap -g openldap -m 0755 /run/slapd
install -d -o root -g root -m 0755 /etc/ldap-seed

: > /etc/machine-id
