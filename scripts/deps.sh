#!/bin/sh
# Installs the Debian packages kvtier needs to build and test; with the
# argument "bench", also the baselines the benchmarks compare against (nginx,
# Redis, s3fs), without starting their system services: the benchmarks start their
# own on loopback. Run as root (or through sudo). Safe to run again.
set -eu

packages="
	build-essential autoconf automake libtool pkg-config
	libsqlite3-dev sqlite3 liburing-dev libssl-dev libisal-dev libinih-dev
	libcmocka-dev
	libfuse3-dev fuse3 libmicrohttpd-dev libcurl4-openssl-dev libs3-dev libxml2-dev
	fio python3 curl attr openssl gnuplot-nox strace rsync git iproute2
	awscli python3-boto3 s3cmd rclone
"
bench_packages="nginx-light redis-server s3fs"

if [ "$(id -u)" -ne 0 ]; then
	exec sudo "$0" "$@"
fi
export DEBIAN_FRONTEND=noninteractive
# Refresh the package lists once a day at most: the lists are large.
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -n 1)" ]; then
	apt-get update -q
fi
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $packages
# Node.js and npm run what some tests fetch from npm (s3rver, the AWS SDK for
# JavaScript). A Node.js installed otherwise brings its own npm and
# conflicts with Debian's npm package: it is kept.
command -v npm >/dev/null 2>&1 || apt-get install -y -q --no-install-recommends nodejs npm
if [ "${1:-}" = bench ]; then
	# policy-rc.d answering 101 keeps the packages from starting daemons.
	policy=/usr/sbin/policy-rc.d
	had_policy=0
	[ -e "$policy" ] && had_policy=1
	[ "$had_policy" = 1 ] || printf '#!/bin/sh\nexit 101\n' > "$policy"
	chmod +x "$policy"
	# shellcheck disable=SC2086
	apt-get install -y -q --no-install-recommends $bench_packages
	[ "$had_policy" = 1 ] || rm -f "$policy"
fi
