// Package grid holds the SuperEdge-style grid controllers: DeploymentGrid and StatefulSetGrid
// (one workload per node unit) and ServiceGrid (one Service with topologyKeys). The sync loops
// (workload_kinds.go and servicegrid.go over workload_controller.go) are thin; naming,
// unit discovery, the desired objects and the plan are pure functions, table-tested.
package grid

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Name length limits of the generated objects.
const (
	// MaxDeploymentNameLen keeps Deployment names DNS-1123 labels, like every grid name.
	MaxDeploymentNameLen = validation.DNS1123LabelMaxLength
	// MaxStatefulSetNameLen: a StatefulSet's pods carry the label
	// controller-revision-hash = {name}-{hash of up to 10 chars}, which must stay <= 63.
	MaxStatefulSetNameLen = 52
	// MaxServiceNameLen: Service names are DNS-1035 labels.
	MaxServiceNameLen = validation.DNS1035LabelMaxLength
)

// hashLen is the length of the hash suffix of a name that had to be made safe.
const hashLen = 8

func shortHash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0}) // "a","bc" and "ab","c" hash differently
	}
	return hex.EncodeToString(h.Sum(nil))[:hashLen]
}

// sanitize lowercases s and turns every run of characters that cannot be in a DNS-1123 label
// into one "-".
func sanitize(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	return b.String()
}

// safeName returns base when it is a valid name of at most maxLen characters (dns1035: it must
// start with a letter too); otherwise a deterministic valid name: base sanitised, cut to leave
// room, then "-" and a short hash of the inputs, so that different inputs that sanitise alike
// still get different names.
func safeName(base string, maxLen int, dns1035 bool, hashInputs ...string) string {
	valid := func(s string) bool {
		if dns1035 {
			return len(validation.IsDNS1035Label(s)) == 0 && len(s) <= maxLen
		}
		return len(validation.IsDNS1123Label(s)) == 0 && len(s) <= maxLen
	}
	if valid(base) {
		return base
	}
	s := strings.Trim(sanitize(base), "-")
	if dns1035 && (s == "" || s[0] < 'a' || s[0] > 'z') {
		s = "g-" + s
	}
	if keep := maxLen - 1 - hashLen; len(s) > keep {
		s = s[:keep]
	}
	s = strings.TrimRight(s, "-")
	if s == "" {
		s = "g"
	}
	return s + "-" + shortHash(hashInputs...)
}

// WorkloadName is the name of a grid's workload for one unit: "{grid}-{value}" when that is a
// valid DNS-1123 label of at most maxLen characters, else a safe name with a hash of grid and
// value (e.g. value "Zone_A" -> "{grid}-zone-a-1a2b3c4d").
func WorkloadName(grid, value string, maxLen int) string {
	return safeName(grid+"-"+value, maxLen, false, grid, value)
}

// ServiceName is the name of a ServiceGrid's Service: "{grid}-svc", or a safe name.
func ServiceName(grid string) string {
	return safeName(grid+"-svc", MaxServiceNameLen, true, grid, "svc")
}

// LabelValue encodes s as a label value: s itself when it is one; else "/" (the prefix
// separator of a label key, which cannot be in a value) becomes "_" — unambiguous, since a
// key's prefix cannot contain "_" —, and what is still invalid or too long is made safe with a
// hash. The readable form goes into an annotation.
func LabelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	enc := strings.ReplaceAll(s, "/", "_")
	if len(validation.IsValidLabelValue(enc)) == 0 {
		return enc
	}
	enc = strings.Trim(labelValueChars(enc), "-_.")
	if keep := validation.LabelValueMaxLength - 1 - hashLen; len(enc) > keep {
		enc = strings.TrimRight(enc[:keep], "-_.")
	}
	if enc == "" {
		return "h-" + shortHash(s)
	}
	return enc + "-" + shortHash(s)
}

func labelValueChars(s string) string {
	return strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '-'
	}, s)
}

// TopologyKeys is the Service annotation value for a grid key: a JSON list, as SuperEdge writes it.
func TopologyKeys(keys ...string) string {
	b, _ := json.Marshal(keys)
	return string(b)
}
