package bench

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A busy API server's answers are repeated; a real refusal is not.
func TestTransient(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{apierrors.NewTooManyRequests("busy", 1), true},
		{apierrors.NewServerTimeout(pods, "create", 1), true},
		{apierrors.NewTimeoutError("slow", 1), true},
		{fmt.Errorf("post: %w", syscall.ECONNREFUSED), true},
		{errors.New(`Post "https://127.0.0.1:1/api/v1/namespaces/a/pods": net/http: TLS handshake timeout`), true},
		{apierrors.NewAlreadyExists(pods, "p"), false},
		{apierrors.NewForbidden(pods, "p", errors.New("no")), false},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", nil), false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	calls := 0
	if err := create(func() error {
		calls++
		if calls < 3 {
			return apierrors.NewTooManyRequests("busy", 0)
		}
		return apierrors.NewAlreadyExists(pods, "p") // the first try went through after all
	}); err != nil || calls != 3 {
		t.Errorf("create = %v after %d calls, want nil after 3", err, calls)
	}
}
