#!/usr/bin/env bash
# Regenerates everything generated in this repo (make generate):
#  - deepcopy, typed clientset, listers, informers, apply configurations with
#    k8s.io/code-generator at the version go.mod pins (kube_codegen.sh);
#  - CRD YAML into manifests/crds with controller-gen (tools/controller-gen module), and
#    their copy in charts/staticip/crds (tools/chart-sync.sh, with the chart's files/).
# Nothing under apis/generated, zz_generated.*, manifests/crds or charts/staticip/{crds,files}
# is edited by hand.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
module=$(go list -m)
bin="$root/_output/tools"
mkdir -p "$bin"

# code-generator at the version the replace block pins.
cg_version=$(sed -n 's#^replace k8s.io/code-generator => k8s.io/code-generator \(v[^ ]*\)$#\1#p' go.mod)
[ -n "$cg_version" ] || { echo "codegen: go.mod has no replace for k8s.io/code-generator (run tools/pin-kubernetes.sh)" >&2; exit 1; }
cg_dir=$(go mod download -json "k8s.io/code-generator@${cg_version}" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
[ -d "$cg_dir" ] || { echo "codegen: cannot find k8s.io/code-generator@${cg_version}" >&2; exit 1; }

export GOBIN="$bin/code-generator-${cg_version}"
mkdir -p "$GOBIN"
# shellcheck disable=SC1091
source "${cg_dir}/kube_codegen.sh"

boilerplate="$root/tools/boilerplate/boilerplate.go.txt"
kube::codegen::gen_helpers --boilerplate "$boilerplate" "$root/apis"
# The scheduler plugins' args types (kubescheduler.config.k8s.io) get their deepcopy here too,
# and — like kube-scheduler's own config — generated defaulting and conversion
# (defaulter-gen, conversion-gen: the +k8s tags in scheduler-plugins/apis/config/v1/doc.go).
kube::codegen::gen_helpers --boilerplate "$boilerplate" "$root/scheduler-plugins/apis"
kube::codegen::gen_client \
  --with-watch \
  --with-applyconfig \
  --output-dir "$root/apis/generated" \
  --output-pkg "${module}/apis/generated" \
  --boilerplate "$boilerplate" \
  "$root/apis"

# The generated clients import packages go.mod may not list yet.
"$root/tools/pin-kubernetes.sh" >/dev/null

# controller-gen from its own module, built once per version.
cgen_version=$(cd tools/controller-gen && go list -m -f '{{.Version}}' sigs.k8s.io/controller-tools)
cgen="$bin/controller-gen-${cgen_version}"
[ -x "$cgen" ] || (cd tools/controller-gen && go build -o "$cgen" sigs.k8s.io/controller-tools/cmd/controller-gen)
rm -rf manifests/crds && mkdir -p manifests/crds
"$cgen" crd:generateEmbeddedObjectMeta=true paths="./apis/..." output:crd:artifacts:config=manifests/crds
tools/run.sh crdtrim manifests/crds
# The chart's crds/ and its value-less objects are copies of manifests/ (never edited by hand).
./tools/chart-sync.sh
# The chart README's values table, from values.yaml's comments.
tools/run.sh helm-docs-lite
echo "codegen: done (code-generator ${cg_version}, controller-gen ${cgen_version})"
