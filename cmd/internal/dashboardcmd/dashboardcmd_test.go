package dashboardcmd

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/e2e/testpki"
	"github.com/flotilla-dev/flotilla/hub/operate"
)

// What is refused before the dashboard serves anything: it acts with a person's credentials,
// so it never listens beyond loopback unless it is behind a proxy it can verify.
func TestRefusedBeforeServing(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := testpki.NewCA(t, "proxy-ca")
	caFile, certFile, keyFile := filepath.Join(dir, "proxy-ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	serving := testpki.NewCA(t, "serving-ca").Server(t, "localhost")
	key, err := x509.MarshalPKCS8PrivateKey(serving.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	for file, data := range map[string][]byte{caFile: ca.PEM(), certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: serving.Certificate[0]}),
		keyFile: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key})} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	behindProxy := Options{Address: "127.0.0.1:0", ProxyCA: caFile, CertFile: certFile, KeyFile: keyFile}
	withGroups := behindProxy
	withGroups.ProxyNames, withGroups.ProxyGroups = "front-proxy", "oncall,system:masters"
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"a proxy without its certificate's names", behindProxy, "--proxy-allowed-names"},
		{"system:masters among the groups passed on", withGroups, "never impersonates"},
		{"all interfaces in local mode", Options{Address: ":8585"}, "loopback"},
		{"a LAN address in local mode", Options{Address: "192.168.1.10:8585"}, "loopback"},
		{"a name in local mode", Options{Address: "dashboard.example.com:8585"}, "loopback"},
		{"no port", Options{Address: "127.0.0.1"}, "loopback"},
		{"a proxy CA that does not exist", Options{Address: ":8443", ProxyCA: filepath.Join(dir, "missing.crt")}, "--proxy-client-ca"},
		{"a proxy CA that is no PEM", Options{Address: ":8443", ProxyCA: notPEM}, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Run(context.Background(), io.Discard, &rest.Config{Host: "https://127.0.0.1:1"}, "fleet-default")
			var input *operate.ErrInput
			if !errors.As(err, &input) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v, want bad input naming %q", err, tc.want)
			}
		})
	}
}
