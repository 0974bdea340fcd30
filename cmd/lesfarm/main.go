// Command lesfarm is the single binary of the lesfarm device farm: the
// coordinator, the host agent, the LES runtime tools and the CI client.
package main

import (
	"os"

	"github.com/lesfarm/lesfarm/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
