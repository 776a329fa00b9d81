package testserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
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

// TLSOptions asks for a server that accepts TLS connections only, on its
// one client port, with certificates from a throwaway CA made with
// crypto/x509 when the server starts (nothing is committed or reused).
type TLSOptions struct {
	// ClientAuth makes the server require a client certificate signed by
	// the CA (Redis tls-auth-clients yes, memcached ssl_verify_mode=2,
	// ZooKeeper ssl.clientAuth=need). Without it the server asks for none.
	ClientAuth bool
}

// TLS is what the clients of a TLS server need: PEM files in a directory
// of the test's, removed with the server.
type TLS struct {
	// CAFile is the CA that signed the server's certificate (valid for
	// 127.0.0.1, ::1 and localhost) and the client's.
	CAFile string
	// CertFile and KeyFile are a client certificate (CN dlock-test-client)
	// and its key, signed by the CA.
	CertFile, KeyFile string
	// WrongCAFile is another CA, which signed nothing here: a client that
	// trusts it alone must fail to verify the server.
	WrongCAFile string
	// ClientAuth is TLSOptions.ClientAuth: the server refuses clients
	// without a certificate signed by the CA.
	ClientAuth bool

	// The server's side, on the host.
	serverCert, serverKey string
	serverKeyStore        string // key and certificate in one PEM file (ZooKeeper's PEM key store)

	client *tls.Config // the probes': the CA and the client certificate
}

// ClientConfig returns a client *tls.Config that trusts CAFile and
// presents the client certificate.
func (t *TLS) ClientConfig() *tls.Config { return t.client.Clone() }

// tlsPaths are where a server finds its TLS files: on the host (local
// provider) or in its container (docker provider).
type tlsPaths struct {
	ca, cert, key, keyStore string
	clientAuth              bool
}

// hostPaths are t's server files as the local provider's servers see them.
func (t *TLS) hostPaths() tlsPaths {
	return tlsPaths{ca: t.CAFile, cert: t.serverCert, key: t.serverKey, keyStore: t.serverKeyStore, clientAuth: t.ClientAuth}
}

// containerTLSDir holds the server's TLS files in a container.
const containerTLSDir = containerDir + "/tls"

// containerFiles are t's server files for a container, and their paths
// there. They are world-readable: the container's server may run as
// another user (memcache) than the one that writes them.
func (t *TLS) containerFiles() ([]containerFile, tlsPaths, error) {
	p := tlsPaths{
		ca: containerTLSDir + "/ca.pem", cert: containerTLSDir + "/server.pem",
		key: containerTLSDir + "/server-key.pem", keyStore: containerTLSDir + "/server-keystore.pem",
		clientAuth: t.ClientAuth,
	}
	var files []containerFile
	for _, f := range []struct{ host, ctr string }{
		{t.CAFile, p.ca}, {t.serverCert, p.cert}, {t.serverKey, p.key}, {t.serverKeyStore, p.keyStore},
	} {
		b, err := os.ReadFile(f.host)
		if err != nil {
			return nil, p, fmt.Errorf("testserver: %w", err)
		}
		files = append(files, containerFile{path: f.ctr, data: b, mode: 0o644})
	}
	return files, p, nil
}

// newTLS makes the CA, server and client certificates of one server or
// group in a fresh directory registered with lt, or returns nil, nil when
// opts is nil.
func newTLS(lt Lifetime, opts *TLSOptions) (*TLS, error) {
	if opts == nil {
		return nil, nil
	}
	dir, err := newWorkDir(lt, "tls")
	if err != nil {
		return nil, err
	}
	t, err := NewTLSFiles(dir, *opts)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// NewTLSFiles writes a throwaway CA, a server certificate for 127.0.0.1,
// ::1 and localhost, a client certificate and another CA (WrongCAFile)
// into dir, as PEM files, and returns them. The server functions call it
// for TLSOptions; tests of TLS configuration that need files but no
// server may call it directly.
func NewTLSFiles(dir string, opts TLSOptions) (*TLS, error) {
	fail := func(err error) (*TLS, error) { return nil, fmt.Errorf("testserver: TLS files: %w", err) }
	now := time.Now()
	ca, caKey, caPEM, err := newCA("dlock-test-ca", now)
	if err != nil {
		return fail(err)
	}
	_, _, wrongPEM, err := newCA("dlock-test-wrong-ca", now)
	if err != nil {
		return fail(err)
	}
	srvPEM, srvKeyPEM, err := newLeaf(ca, caKey, now, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return fail(err)
	}
	cliPEM, cliKeyPEM, err := newLeaf(ca, caKey, now, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "dlock-test-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return fail(err)
	}
	t := &TLS{
		CAFile:         filepath.Join(dir, "ca.pem"),
		CertFile:       filepath.Join(dir, "client.pem"),
		KeyFile:        filepath.Join(dir, "client-key.pem"),
		WrongCAFile:    filepath.Join(dir, "wrong-ca.pem"),
		ClientAuth:     opts.ClientAuth,
		serverCert:     filepath.Join(dir, "server.pem"),
		serverKey:      filepath.Join(dir, "server-key.pem"),
		serverKeyStore: filepath.Join(dir, "server-keystore.pem"),
	}
	for _, f := range []struct {
		path string
		data []byte
	}{
		{t.CAFile, caPEM}, {t.WrongCAFile, wrongPEM},
		{t.CertFile, cliPEM}, {t.KeyFile, cliKeyPEM},
		{t.serverCert, srvPEM}, {t.serverKey, srvKeyPEM},
		{t.serverKeyStore, append(append([]byte{}, srvKeyPEM...), srvPEM...)},
	} {
		// 0644: a server in a container may run as another user; the
		// keys are throwaway. The client's key is 0600, as libpq (psql)
		// wants of the sslkey it is given.
		mode := os.FileMode(0o644)
		if f.path == t.KeyFile {
			mode = 0o600
		}
		if err := os.WriteFile(f.path, f.data, mode); err != nil {
			return fail(err)
		}
	}
	pair, err := tls.X509KeyPair(cliPEM, cliKeyPEM)
	if err != nil {
		return fail(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	t.client = &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	return t, nil
}

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k) // PKCS #8: what ZooKeeper's PEM key store reads
	if err != nil {
		return nil, nil, err
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
}

func newCA(name string, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	k, _, err := newKey()
	if err != nil {
		return nil, nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(48 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return cert, k, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// newLeaf signs tmpl (its names and key usages) with the CA and returns
// the certificate and its new key, as PEM.
func newLeaf(ca *x509.Certificate, caKey *ecdsa.PrivateKey, now time.Time, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	k, keyPEM, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	if tmpl.SerialNumber, err = serial(); err != nil {
		return nil, nil, err
	}
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// probeDial connects a harness probe to addr, over TLS when tc is set.
func probeDial(ctx context.Context, addr string, tc *tls.Config) (net.Conn, error) {
	if tc == nil {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	d := tls.Dialer{Config: tc}
	return d.DialContext(ctx, "tcp", addr)
}

// probeConfig is the probes' client config of t, nil for a plain server.
func (t *TLS) probeConfig() *tls.Config {
	if t == nil {
		return nil
	}
	return t.client
}
