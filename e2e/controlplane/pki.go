package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the set of keys and certificates of one cluster, written as PEM files into dir.
type pki struct {
	dir string
	// CAData is the cluster CA certificate in PEM form, for kubeconfigs.
	caData []byte
	// admin client certificate and key in PEM form (group system:masters).
	adminCert, adminKey []byte
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// newPKI creates a CA, an API server serving certificate, an admin client certificate and the
// service-account signing key. The certificate is valid for the loopback addresses and the
// in-cluster names; with an external address, for that address and the in-cluster names only,
// as a real cluster's is for its public address and not for the loopback one it listens on.
func newPKI(dir string, external net.IP) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create pki dir: %w", err)
	}
	p := &pki{dir: dir}
	now := time.Now().Add(-time.Hour)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("failed to generate CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "flotilla-test-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("failed to sign CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("failed to parse CA: %w", err)
	}
	p.caData = pemBlock("CERTIFICATE", caDER)

	issue := func(serial int64, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, fmt.Errorf("failed to generate key: %w", err)
		}
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore = now
		tmpl.NotAfter = now.Add(10 * 365 * 24 * time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, fmt.Errorf("failed to sign %s: %w", tmpl.Subject.CommonName, err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, nil, fmt.Errorf("failed to encode key: %w", err)
		}
		return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER), nil
	}

	servingCert, servingKey, err := issue(2, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    servingNames(external),
		IPAddresses: servingIPs(external),
	})
	if err != nil {
		return nil, err
	}
	p.adminCert, p.adminKey, err = issue(3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "flotilla-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("failed to generate service-account key: %w", err)
	}
	saKeyDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, fmt.Errorf("failed to encode service-account key: %w", err)
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("failed to encode service-account public key: %w", err)
	}
	caKeyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		return nil, fmt.Errorf("failed to encode CA key: %w", err)
	}

	files := map[string][]byte{
		"ca.crt":        p.caData,
		"ca.key":        pemBlock("EC PRIVATE KEY", caKeyDER),
		"apiserver.crt": servingCert,
		"apiserver.key": servingKey,
		"admin.crt":     p.adminCert,
		"admin.key":     p.adminKey,
		"sa.key":        pemBlock("EC PRIVATE KEY", saKeyDER),
		"sa.pub":        pemBlock("PUBLIC KEY", saPubDER),
	}
	for name, data := range files {
		if err := os.WriteFile(p.path(name), data, 0o600); err != nil {
			return nil, fmt.Errorf("failed to write %s: %w", name, err)
		}
	}
	return p, nil
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

// inClusterName is the API server's name inside its cluster.
const inClusterName = "kubernetes.default.svc"

func servingNames(external net.IP) []string {
	names := []string{"kubernetes", "kubernetes.default", inClusterName, "kubernetes.default.svc.cluster.local"}
	if external == nil {
		names = append(names, "localhost")
	}
	return names
}

func servingIPs(external net.IP) []net.IP {
	if external != nil {
		return []net.IP{external, net.ParseIP(serviceIP)}
	}
	return []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP(serviceIP)}
}
