package endpoint

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
)

func TestAddressListsAdmitOnlyWhatTheyName(t *testing.T) {
	for _, tc := range []struct {
		entries      []string
		scheme, host string
		ip           string
		want         bool
	}{
		{[]string{"10.0.0.0/8"}, "https", "prometheus.monitoring.svc", "10.96.4.2", true},
		{[]string{"10.0.0.0/8"}, "https", "elsewhere.example", "192.0.2.1", false},
		{[]string{"0.0.0.0/0"}, "http", "metadata", "169.254.169.254", false},
		{[]string{"0.0.0.0/0", "::/0"}, "http", "127.0.0.1", "127.0.0.1", false},
		{[]string{"::/0"}, "http", "metadata", "fd00:ec2::254", false},
		{[]string{"::/0"}, "http", "mapped", "::ffff:127.0.0.1", false},
		{[]string{"127.0.0.1"}, "http", "127.0.0.1", "127.0.0.1", true},
		{[]string{"127.0.0.0/8"}, "http", "127.0.0.2", "127.0.0.2", true},
		{[]string{"169.254.169.254/32"}, "http", "169.254.169.254", "169.254.169.254", true},
		{[]string{"prometheus.local"}, "http", "prometheus.local", "127.0.0.1", true},
		{[]string{"*.example.com"}, "https", "hooks.example.com", "203.0.113.9", true},
		{[]string{"*.example.com"}, "https", "rebound.example.com", "127.0.0.1", false},
		{[]string{"*.example.com"}, "https", "example.com.evil", "203.0.113.9", false},
		{[]string{"https://*.example.com"}, "http", "hooks.example.com", "203.0.113.9", false},
		{[]string{"https://203.0.113.0/24"}, "https", "x", "203.0.113.9", true},
		{nil, "https", "hooks.example.com", "203.0.113.9", false},
	} {
		l, err := ParseAddressList("list", tc.entries)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.admitsAddr(tc.scheme, tc.host, netip.MustParseAddr(tc.ip)); got != tc.want {
			t.Errorf("%v admits %s://%s at %s: %v, want %v", tc.entries, tc.scheme, tc.host, tc.ip, got, tc.want)
		}
	}
	for _, bad := range []string{"ftp://x.example", "exa mple.com", "*.", "x..example", "host.example."} {
		if _, err := ParseAddressList("list", []string{bad}); err == nil || !strings.Contains(err.Error(), "list[0]") {
			t.Errorf("%q parsed: %v", bad, err)
		}
	}
}

// A client reaches a server on loopback only where every list of its policy names loopback:
// 0.0.0.0/0 does not, a FleetRestriction's list narrows the hub's, and a refused request never
// reaches the server; the error names the list that refused it.
func TestAClientReachesOnlyWhatItsPolicyAdmits(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
	defer srv.Close()
	hub := MustParseAddressList("--allowed-provider-addresses", "127.0.0.1")
	for _, tc := range []struct {
		name    string
		policy  Policy
		refused string
	}{
		{"listed", Policy{hub}, ""},
		{"no list", nil, "no allow-list"},
		{"every address but loopback", Policy{MustParseAddressList("--allowed-provider-addresses", "0.0.0.0/0", "::/0")}, "--allowed-provider-addresses"},
		{"a restriction narrows the hub's list", Policy{hub, MustParseAddressList("FleetRestriction team-a", "10.0.0.0/8")}, "FleetRestriction team-a"},
		{"by name only over https", Policy{MustParseAddressList("--allowed-provider-addresses", "https://127.0.0.1")}, "--allowed-provider-addresses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := served.Load()
			hc, err := NewClient(context.Background(), nil, "", Options{Allowed: tc.policy})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := hc.Get(srv.URL + "/api/v1/query")
			if resp != nil {
				resp.Body.Close()
			}
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused) || !errors.Is(err, ErrNotAllowed) && !strings.Contains(err.Error(), ErrNotAllowed.Error())):
				t.Errorf("got %v; want refused by %s", err, tc.refused)
			case tc.refused != "" && served.Load() != before:
				t.Errorf("the server was reached")
			}
		})
	}
}

// A name is checked by the address it resolves to when the connection is made: localhost passes
// a list of every address by name, and is refused at the connection, unreached.
func TestANameIsCheckedByWhereItResolves(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
	defer srv.Close()
	byName := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	hc, err := NewClient(context.Background(), nil, "", Options{Allowed: Policy{MustParseAddressList("--allowed-provider-addresses", "0.0.0.0/0", "::/0")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := hc.Get(byName); err == nil || !strings.Contains(err.Error(), "localhost (") || !strings.Contains(err.Error(), ErrNotAllowed.Error()) {
		if resp != nil {
			resp.Body.Close()
		}
		t.Errorf("%s: %v; want refused at the connection", byName, err)
	}
	named, err := NewClient(context.Background(), nil, "", Options{Allowed: Policy{MustParseAddressList("--allowed-provider-addresses", "localhost")}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := named.Get(byName)
	if err != nil {
		t.Fatalf("localhost named exactly: %v", err)
	}
	resp.Body.Close()
	if served.Load() != 1 {
		t.Errorf("the server was reached %d times, want once (by the list that names localhost)", served.Load())
	}
}

// FuzzAddressListsKeepTheSpecialRanges: whatever a list holds, an address in a loopback,
// link-local, metadata or unspecified range is admitted only by an entry inside that range or
// an exact host name, never by a wider CIDR or a wildcard.
func FuzzAddressListsKeepTheSpecialRanges(f *testing.F) {
	f.Add("0.0.0.0/0", "127.0.0.1", "prometheus.example")
	f.Add("*.example", "169.254.169.254", "a.example")
	f.Add("::/0", "::ffff:169.254.169.254", "x")
	f.Add("128.0.0.0/1", "fe80::1", "y")
	f.Fuzz(func(t *testing.T, entry, ip, host string) {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			return
		}
		sr, isSpecial := specialRange(a.Unmap())
		if !isSpecial {
			return
		}
		l, err := ParseAddressList("fuzz", []string{entry})
		if err != nil || len(l.entries) != 1 {
			return
		}
		e := l.entries[0]
		named := e.host == strings.ToLower(host) || e.prefix.IsValid() && sr.Bits() <= e.prefix.Bits() && sr.Contains(e.prefix.Addr())
		if l.admitsAddr("https", host, a) && !named {
			t.Fatalf("%q admits %s for %q", entry, a, host)
		}
	})
}
