package cli

import (
	"crypto/tls"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/internal/cli/labca"
)

// serveTLSFlags are serve's certificate flags: one pair for the HTTPS API
// and one for the embedded NATS listener, which defaults to the first.
type serveTLSFlags struct {
	cert, key         string
	natsCert, natsKey string
}

func (f *serveTLSFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.cert, "tls-cert", "", "PEM server certificate: serve the REST API and dashboard over HTTPS only (and the embedded NATS over TLS, see --nats-tls-cert); 'lesfarm tls init' makes one")
	fl.StringVar(&f.key, "tls-key", "", "PEM private key of --tls-cert")
	fl.StringVar(&f.natsCert, "nats-tls-cert", "", "PEM server certificate of the embedded NATS listener (default --tls-cert): every client must then speak TLS")
	fl.StringVar(&f.natsKey, "nats-tls-key", "", "PEM private key of --nats-tls-cert (default --tls-key)")
}

// configs loads the HTTP and embedded NATS server TLS configurations (nil
// for a listener left in plaintext). external is set with --nats-url,
// whose TLS is the external server's.
func (f *serveTLSFlags) configs(external bool) (httpTLS, natsTLS *tls.Config, err error) {
	if (f.cert == "") != (f.key == "") {
		return nil, nil, usagef("--tls-cert and --tls-key go together")
	}
	if (f.natsCert == "") != (f.natsKey == "") {
		return nil, nil, usagef("--nats-tls-cert and --nats-tls-key go together")
	}
	if external && f.natsCert != "" {
		return nil, nil, usagef("--nats-tls-cert applies to the embedded NATS server; with --nats-url the server's own TLS applies (see --ca)")
	}
	if f.cert != "" {
		if httpTLS, err = labca.ServerConfig(f.cert, f.key); err != nil {
			return nil, nil, usagef("--tls-cert: %v", err)
		}
	}
	if external {
		return httpTLS, nil, nil
	}
	switch {
	case f.natsCert != "":
		if natsTLS, err = labca.ServerConfig(f.natsCert, f.natsKey); err != nil {
			return nil, nil, usagef("--nats-tls-cert: %v", err)
		}
	case httpTLS != nil:
		natsTLS = httpTLS.Clone()
	}
	return httpTLS, natsTLS, nil
}
