package wire

// Throwaway signing certificates for the simulator and tests: a root, an
// intermediate and an RSA leaf, so a receiver checks a chain as it would
// PayPal's, never a lone self-signed certificate.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"time"
)

// TestCertName is the leaf's name when none is given: PayPal's sandbox one.
const TestCertName = "messageverificationcerts.sandbox.paypal.com"

// Certs is a made chain. Serve ChainPEM at the cert URL, trust Roots, sign
// with Key (Signer{Key: c.Key, ...}).
type Certs struct {
	Key      *rsa.PrivateKey   // the leaf's
	Leaf     *x509.Certificate // named names[0] (CN and DNS names: all of names)
	ChainPEM []byte            // the leaf, then the intermediate
	RootPEM  []byte
	Roots    *x509.CertPool // the root alone

	root    *x509.Certificate
	rootKey *ecdsa.PrivateKey
}

// NewCerts makes a chain whose every certificate is valid from from until
// until, its leaf named names (TestCertName when none).
func NewCerts(from, until time.Time, names ...string) (*Certs, error) {
	// The CAs sign with P-256: fast to make; only the leaf must be RSA.
	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	rootT := ca(1, "refundkit test root", from, until)
	rootDER, err := x509.CreateCertificate(rand.Reader, rootT, rootT, &rootKey.PublicKey, rootKey)
	if err != nil {
		return nil, err
	}
	root, _ := x509.ParseCertificate(rootDER)
	roots := x509.NewCertPool()
	roots.AddCert(root)
	c := &Certs{RootPEM: pemBlock(rootDER), Roots: roots, root: root, rootKey: rootKey}
	return c.Renew(names...)
}

// Renew is a new signing certificate (a new intermediate and an RSA leaf
// with a key of its own) under the same root, valid as long: a signer's
// certificate rotated, which a receiver trusting the root accepts.
func (c *Certs) Renew(names ...string) (*Certs, error) {
	if len(names) == 0 {
		names = []string{TestCertName}
	}
	from, until := c.root.NotBefore, c.root.NotAfter
	midKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leafKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	// Serials of their own: a renewed chain is another chain to a reader.
	midDER, err := x509.CreateCertificate(rand.Reader, ca(serial(), "refundkit test intermediate", from, until), c.root, &midKey.PublicKey, c.rootKey)
	if err != nil {
		return nil, err
	}
	mid, _ := x509.ParseCertificate(midDER)
	leafT := &x509.Certificate{SerialNumber: big.NewInt(serial()), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: from, NotAfter: until, KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafT, mid, &leafKey.PublicKey, midKey)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(leafDER)
	if err != nil {
		return nil, err
	}
	return &Certs{Key: leafKey, Leaf: leaf, ChainPEM: append(pemBlock(leafDER), pemBlock(midDER)...), RootPEM: c.RootPEM, Roots: c.Roots,
		root: c.root, rootKey: c.rootKey}, nil
}

func ca(serial int64, cn string, from, until time.Time) *x509.Certificate {
	return &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: from, NotAfter: until, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
}

// serial is a random certificate serial number, above the root's and
// the certificate host's.
func serial() int64 {
	n, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	return n.Int64() + 16
}

func pemBlock(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// ServerCert is a TLS server certificate for ips, issued by the chain's
// root for as long as the chain is valid: a simulator serves ChainPEM over
// HTTPS with it, so that one root (RootPEM) is all a receiver trusts.
func (c *Certs) ServerCert(ips ...net.IP) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	t := &x509.Certificate{SerialNumber: big.NewInt(4), Subject: pkix.Name{CommonName: "refundkit test certificate host"},
		IPAddresses: ips, NotBefore: c.root.NotBefore, NotAfter: c.root.NotAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, t, c.root, &key.PublicKey, c.rootKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
