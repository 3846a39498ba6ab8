package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// adminCases check store.Admin, which `respgate admin` uses.
var adminCases = []storeCase{
	{"admin locates a response of any tenant with its lease", testAdminLocate},
	{"admin lists a tenant's response ids in pages", testAdminIDList},
	{"admin counts exactly what purge deletes", testAdminPurgeCount},
}

func admin(t *testing.T, s store.Store) store.Admin {
	t.Helper()
	a, ok := s.(store.Admin)
	if !ok {
		t.Fatalf("%T does not implement store.Admin", s)
	}
	return a
}

func testAdminLocate(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := admin(t, s)
	noErr(t, "commit", s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: newResponse(tenantB, "resp_admin_done", "", "", wire.StatusCompleted)}))
	expires := now().Add(time.Hour).Truncate(time.Microsecond)
	noErr(t, "begin", s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: newResponse(tenantA, "resp_admin_running", "", "", wire.StatusInProgress),
		LeaseOwner: "replica-7", LeaseExpiresAt: expires}))

	loc, err := a.ResponseLocate(ctx, &store.ResponseLocateParams{ID: "resp_admin_done"})
	noErr(t, "locate done", err)
	if loc.Tenant != tenantB || loc.LeaseOwner != "" || loc.LeaseExpiresAt != nil {
		t.Fatalf("locate done = %+v, want tenant B and no lease", loc)
	}
	loc, err = a.ResponseLocate(ctx, &store.ResponseLocateParams{ID: "resp_admin_running"})
	noErr(t, "locate running", err)
	if loc.Tenant != tenantA || loc.LeaseOwner != "replica-7" || loc.LeaseExpiresAt == nil || !loc.LeaseExpiresAt.Equal(expires) {
		t.Fatalf("locate running = %+v, want tenant A, replica-7 until %v", loc, expires)
	}
	_, err = a.ResponseLocate(ctx, &store.ResponseLocateParams{ID: "resp_nobody"})
	isNotFound(t, "locate unknown", err)
}

func testAdminIDList(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := admin(t, s)
	for _, id := range []string{"resp_c", "resp_a", "resp_b"} {
		noErr(t, "commit "+id, s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: newResponse(tenantA, id, "", "", wire.StatusCompleted)}))
	}
	noErr(t, "commit other tenant", s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: newResponse(tenantB, "resp_0", "", "", wire.StatusCompleted)}))
	var all []string
	after := ""
	for range 5 {
		page, err := a.ResponseIDList(ctx, &store.ResponseIDListParams{Tenant: tenantA, After: after, Limit: 2})
		noErr(t, "list", err)
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
		after = page[len(page)-1]
	}
	if !slices.Equal(all, []string{"resp_a", "resp_b", "resp_c"}) {
		t.Fatalf("ids = %v, want tenant A's three in id order", all)
	}
}

func testAdminPurgeCount(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := admin(t, s)
	old := now().Add(-48 * time.Hour)
	for i, tenant := range []string{tenantA, tenantB} {
		r := newResponse(tenant, "resp_old_"+string(rune('a'+i)), "", "", wire.StatusCompleted)
		r.CreatedAt = old
		noErr(t, "commit", s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: r}))
	}
	noErr(t, "commit new", s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: newResponse(tenantA, "resp_new", "", "", wire.StatusCompleted)}))
	running := newResponse(tenantA, "resp_old_running", "", "", wire.StatusInProgress)
	running.CreatedAt = old
	noErr(t, "begin", s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: running, LeaseOwner: "w", LeaseExpiresAt: now().Add(time.Hour)}))

	before := now().Add(-time.Hour)
	n, err := a.ResponsePurgeCount(ctx, &store.ResponsePurgeCountParams{Before: before})
	noErr(t, "count", err)
	purged, err := s.ResponsePurge(ctx, &store.ResponsePurgeParams{Before: before, Limit: 100})
	noErr(t, "purge", err)
	if n != 2 || purged != n {
		t.Fatalf("count said %d, purge deleted %d; want 2 and 2", n, purged)
	}
	n, err = a.ResponsePurgeCount(ctx, &store.ResponsePurgeCountParams{Before: before})
	if err != nil || n != 0 {
		t.Fatalf("count after purge = %d, %v; want 0", n, err)
	}
}
