// Package ordinal is the one rule for the ordinal in a StatefulSet-style pod name
// "{parent}-{n}": the EnhancedStatefulSet controller and planner, the StaticIP controller,
// statefulset-grid-daemon and the benchmarks all read ordinals through it.
//
// The rule is the upstream StatefulSet controller's (k8s.io/kubernetes
// pkg/controller/statefulset/stateful_set_utils.go getParentNameAndOrdinal): the parent is
// the name before the last dash, the ordinal the decimal digits after it, within int32. One
// thing is stricter than upstream, as every copy this package replaced was: the ordinal must be
// written the way the controllers write it (fmt "%d"), so "web-01" is not ordinal 1 of "web" —
// otherwise two pods, web-1 and web-01, could claim one identity (and one fixed IP).
//
// The package has no dependencies, as apis/workloadref, so any binary can use it.
package ordinal

import (
	"strconv"
	"strings"
)

// Name is the name of the pod of ordinal n in parent: "{parent}-{n}".
func Name(parent string, n int) string { return parent + "-" + strconv.Itoa(n) }

// Parse splits a pod name at its last dash into parent and ordinal (upstream's
// getParentNameAndOrdinal); ok is false when the name has no dash, nothing before it, or no
// ordinal after it. Parse("web-a-3") is "web-a", 3.
func Parse(name string) (parent string, n int, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return "", -1, false
	}
	if n, ok = parseNumber(name[i+1:]); !ok {
		return "", -1, false
	}
	return name[:i], n, true
}

// Of is the ordinal of the pod named name in parent, or -1 when name is not
// "{parent}-{n}". A parent name may itself contain dashes: Of("web-a", "web-a-3") is 3 and
// Of("web", "web-a-3") is -1.
func Of(parent, name string) int {
	rest, found := strings.CutPrefix(name, parent+"-")
	if !found {
		return -1
	}
	n, ok := parseNumber(rest)
	if !ok {
		return -1
	}
	return n
}

// parseNumber accepts what strconv.Itoa of an int in [0, MaxInt32] writes: digits only, no
// sign, no leading zero.
func parseNumber(s string) (int, bool) {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return -1, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return -1, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return -1, false
	}
	return int(v), true
}
