package staticipnode

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// A watch gap: the scheduler's informer (through a queueing hint) already applied a newer
// version; this cache's own informer then relists and delivers the deletion as a tombstone
// carrying the older object it last saw. The object is gone: the tombstone must win.
func TestTombstoneAlwaysApplied(t *testing.T) {
	c := NewEmpty()
	old := sip("ns", "web-0", "n1", "2")
	old.UID, old.ResourceVersion = "u1", "5"
	c.OnStaticIPUpdate(nil, old)
	newer := old.DeepCopy()
	newer.ResourceVersion = "10"
	c.OnStaticIPUpdate(old, newer)
	c.OnStaticIPDelete(cache.DeletedFinalStateUnknown{Key: "ns/web-0", Obj: old})
	if held := c.Node("n1").Held; len(held) != 0 {
		t.Fatalf("a lost delete keeps a reservation forever: n1 holds %+v", held)
	}
	if _, ok := c.StaticIPForPod("ns", "web-0"); ok {
		t.Fatal("the deleted StaticIP still pins its pod")
	}
}

// A tombstone about an object that was deleted and created again (another UID) since must
// not delete the new one.
func TestTombstoneOfAnOlderIncarnation(t *testing.T) {
	c := NewEmpty()
	again := sip("ns", "web-0", "n2", "1")
	again.UID, again.ResourceVersion = "u2", "20"
	c.OnStaticIPUpdate(nil, again)
	gone := sip("ns", "web-0", "n1", "1")
	gone.UID, gone.ResourceVersion = "u1", "5"
	c.OnStaticIPDelete(cache.DeletedFinalStateUnknown{Key: "ns/web-0", Obj: gone})
	if len(c.Node("n2").Held) != 1 {
		t.Fatal("a tombstone of the old object deleted the re-created one")
	}
}

// The versions of deleted objects are forgotten after deletedVersionTTL, so churn does not
// grow the map without bound; until then a late update cannot bring the object back.
func TestDeletedVersionsExpire(t *testing.T) {
	c := NewEmpty()
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	for i := range 100 {
		s := sip("ns", fmt.Sprintf("web-%d", i), "n1", "1")
		s.UID, s.ResourceVersion = types.UID(fmt.Sprint(i)), fmt.Sprint(10+i)
		c.OnStaticIPUpdate(nil, s)
		c.OnStaticIPDelete(s)
		c.OnStaticIPUpdate(nil, s) // the other source's late copy
	}
	if held := c.Node("n1").Held; len(held) != 0 {
		t.Fatalf("late updates resurrected deleted StaticIPs: %d held", len(held))
	}
	if got := c.VersionsTracked(); got != 100 {
		t.Fatalf("%d versions tracked before expiry, want 100", got)
	}
	now = now.Add(deletedVersionTTL + time.Second)
	last := sip("ns", "other", "n1", "1")
	last.ResourceVersion = "500"
	c.OnStaticIPUpdate(nil, last)
	c.OnStaticIPDelete(last) // any deletion sweeps the expired ones
	if got := c.VersionsTracked(); got != 1 {
		t.Fatalf("%d versions tracked after the TTL, want 1 (the newest deletion)", got)
	}
}
