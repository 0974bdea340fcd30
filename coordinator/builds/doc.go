// Package builds reads and checks the executables of a build before the
// coordinator registers it (POST /v1/builds, lesfarm build push).
//
// A build is code: one lesfarm executable per platform, identified by its
// sha256. Inspect reads an executable's embedded Go build information with
// debug/buildinfo, which works for any GOOS/GOARCH without running the
// file, and refuses anything that is not a lesfarm binary: a file that is
// not a Go executable (or is truncated), or a Go executable whose main
// module is not ModulePath or whose main package is not MainPackage.
// Check then holds a build's executables against each other and against
// the git sha the pusher claims: each executable's GOOS/GOARCH must be the
// platform it is declared for, a --git-sha must be a prefix of the
// executables' vcs.revision, and executables built from different
// revisions do not form one build. A binary built from a modified tree
// (vcs.modified=true) is accepted and the build flagged dirty.
//
// Build information is metadata the file carries about itself, not proof:
// it catches the wrong file, not a forged one. Identity is always the
// executable's sha256; the revision may even be empty (a machine that sets
// GOFLAGS=-buildvcs=false stamps none, and every such binary reports
// "(devel)").
//
// The package reads files only. It must not import the runtime (tensor
// kernels, model code): the coordinator accepts builds without linking
// them. Nearest, for "did you mean" answers to an unknown build id, lives
// here too because it is pure.
package builds
