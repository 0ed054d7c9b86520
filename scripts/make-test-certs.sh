#!/usr/bin/env bash
# Makes throwaway certificates for trying BRAID_TLS, and for the TLS tests:
#
#   scripts/make-test-certs.sh DIR [RANKS]
#
#   DIR/ca.pem                  the job's CA (ca.key next to it)
#   DIR/rank0.pem, rank0.key    one certificate per rank (default 2), signed by it
#   DIR/other-ca.pem            another CA
#   DIR/impostor.pem, .key      a certificate that other CA signed
#
# Then: BRAID_TLS=1 BRAID_TLS_CERT=DIR/rank0.pem BRAID_TLS_KEY=DIR/rank0.key
# BRAID_TLS_CA=DIR/ca.pem (one rank's certificate may serve every rank).
# Keys are P-256 and unencrypted, and the CA key lies beside them: for tests
# and trials only, never for a job that needs the protection.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 DIR [RANKS]" >&2
  exit 2
fi
dir=$1
ranks=${2:-2}
command -v openssl >/dev/null || { echo "make-test-certs: needs the openssl command" >&2; exit 1; }
mkdir -p "$dir"
cd "$dir"

# A leaf serves as both TLS client (dialing) and server (accepting).
cat > leaf.ext <<'EXT'
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
EXT

make_ca() {  # name subject
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
    -keyout "$1.key" -out "$1.pem" -subj "$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

make_leaf() {  # name subject ca
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -set_serial "0x$(openssl rand -hex 8)" \
    -days 30 -extfile leaf.ext -out "$1.pem" 2>/dev/null
  rm -f "$1.csr"
}

make_ca ca "/O=braid test/CN=braid test CA"
for ((r = 0; r < ranks; r++)); do
  make_leaf "rank$r" "/O=braid test/CN=braid rank $r" ca
done
make_ca other-ca "/O=someone else/CN=another CA"
make_leaf impostor "/O=someone else/CN=impostor" other-ca
rm -f leaf.ext
chmod 600 ./*.key
