#!/bin/sh
# The image's entrypoint. Passwords are files (compose secrets), never values in the env
# file nor in `docker inspect`: this completes the two connection URLs with them and
# exports the variables a mailbox's `password_env` names, then runs the command.
#   SYNEDRE_DATABASE_PASSWORD_FILE  -> into SYNEDRE_DATABASE_URL (postgresql://USER@HOST/DB)
#   SYNEDRE_BROKER_PASSWORD_FILE    -> into SYNEDRE_BROKER_URL   (redis://HOST:PORT/DB)
#   /run/secrets/env/NAME           -> the variable NAME (e.g. ATLAS_IMAP_PASSWORD)
#                                      (SYNEDRE_SECRET_ENV_DIR: another directory)
set -eu

die() { echo "synedre-entrypoint: $*" >&2; exit 2; }

# with_password URL FILE: URL with the file's password as its userinfo password.
with_password() {
  password=$(cat "$2") || die "cannot read $2"
  # URL-safe only (openssl rand -hex 32): nothing to percent-encode, nothing to escape.
  case "$password" in ""|*[!A-Za-z0-9._~-]*) die "$2: the password must be non-empty, [A-Za-z0-9._~-] only";; esac
  scheme=${1%%://*}
  rest=${1#*://}
  authority=${rest%%/*}
  case "$authority" in
    *:*@*) die "$2 is set but the URL already holds a password";;
    *@*) user=${rest%%@*}; rest=${rest#*@};;
    *) user="";;
  esac
  printf '%s://%s:%s@%s' "$scheme" "$user" "$password" "$rest"
}

if [ -n "${SYNEDRE_DATABASE_PASSWORD_FILE:-}" ]; then
  SYNEDRE_DATABASE_URL=$(with_password "${SYNEDRE_DATABASE_URL:?SYNEDRE_DATABASE_URL is unset}" \
                         "$SYNEDRE_DATABASE_PASSWORD_FILE") || exit 2
  export SYNEDRE_DATABASE_URL
fi
if [ -n "${SYNEDRE_BROKER_PASSWORD_FILE:-}" ]; then
  SYNEDRE_BROKER_URL=$(with_password "${SYNEDRE_BROKER_URL:?SYNEDRE_BROKER_URL is unset}" \
                       "$SYNEDRE_BROKER_PASSWORD_FILE") || exit 2
  export SYNEDRE_BROKER_URL
fi
unset SYNEDRE_DATABASE_PASSWORD_FILE SYNEDRE_BROKER_PASSWORD_FILE

env_dir=${SYNEDRE_SECRET_ENV_DIR:-/run/secrets/env}
unset SYNEDRE_SECRET_ENV_DIR
if [ -d "$env_dir" ]; then
  for f in "$env_dir"/*; do
    [ -f "$f" ] || continue
    name=${f##*/}
    case "$name" in ""|[0-9]*|*[!A-Za-z0-9_]*) die "$f: not a variable name";; esac
    value=$(cat "$f") || die "cannot read $f"
    export "$name=$value"
  done
fi

exec "$@"
