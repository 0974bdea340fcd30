package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
)

func init() { register("tokenize", newTokenizeCmd) }

// tokenizeJSON is the tokenize output (issue 3 contract: {"token_ids":[...]}).
type tokenizeJSON struct {
	TokenIDs []int    `json:"token_ids"`
	Pieces   []string `json:"pieces,omitempty"`
}

func newTokenizeCmd(env *Env) *cobra.Command {
	var (
		modelPath, text string
		special, pieces bool
		addSpecial      bool
	)
	cmd := &cobra.Command{
		Use:   "tokenize --model PATH --text TEXT",
		Short: "Print the token ids of a text with a GGUF model's tokenizer",
		Long: `Tokenize reads only the tokenizer.ggml.* metadata of a GGUF file (no weights,
any architecture; a vocab-only GGUF works) and prints one JSON object:
  {"token_ids":[...]}

The ids equal llama.cpp's for the same file: byte-level BPE (tokenizer.ggml.model
gpt2) with the pre-tokenizer named by tokenizer.ggml.pre (gpt-2, qwen2, llama3,
default). BOS/EOS are added when the model's add_bos_token/add_eos_token say so
(--add-special=false turns that off).

By default control tokens written in the text (e.g. "<|im_start|>") are
tokenized as plain text; --special turns them into their ids, like llama.cpp's
parse_special. --text - reads the text from standard input.`,
		Example: `  lesfarm tokenize --model tiny.gguf --text "The quick brown fox"
  lesfarm tokenize --model tiny.gguf --special --pieces --text "<|im_start|>user"
  cat prompt.txt | lesfarm tokenize --model tiny.gguf --text -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if modelPath == "" {
				return usagef("--model is required: give the path of a GGUF model file")
			}
			if !cmd.Flags().Changed("text") {
				return usagef("--text is required: give the text to tokenize, or - to read standard input")
			}
			if text == "-" {
				b, err := io.ReadAll(env.Stdin)
				if err != nil {
					return fmt.Errorf("tokenize: reading standard input: %w", err)
				}
				text = string(b)
			}
			tok, err := openTokenizer(modelPath)
			if err != nil {
				return err
			}
			out := tokenizeJSON{TokenIDs: tok.Tokenize(text, addSpecial, special)}
			if out.TokenIDs == nil {
				out.TokenIDs = []int{}
			}
			if pieces {
				out.Pieces = make([]string, len(out.TokenIDs))
				for i, id := range out.TokenIDs {
					out.Pieces[i] = tok.Piece(id)
				}
			}
			enc := json.NewEncoder(env.Stdout)
			enc.SetEscapeHTML(false)
			return enc.Encode(out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&modelPath, "model", "", "path of the GGUF file whose tokenizer to use (required)")
	f.StringVar(&text, "text", "", "text to tokenize (required); - reads standard input")
	f.BoolVar(&special, "special", false, "turn control-token texts such as <|im_start|> into their ids")
	f.BoolVar(&addSpecial, "add-special", true, "add BOS/EOS when the model's metadata asks for them")
	f.BoolVar(&pieces, "pieces", false, `also print "pieces": the text of each token`)
	return cmd
}

// openTokenizer reads the tokenizer of a GGUF file, turning bad input into
// one-line usage errors that name the path and the fix.
func openTokenizer(path string) (*tokenizer.Tokenizer, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, usagef("model file %s does not exist: check the --model path", path)
	}
	if err != nil {
		return nil, usagef("cannot read model file %s: %v", path, err)
	}
	if st.IsDir() {
		return nil, usagef("model path %s is a directory: give the .gguf file", path)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, usagef("%v: give a valid GGUF v3 file", err)
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, usagef("model %s has no usable tokenizer (%v): use a GGUF with tokenizer.ggml.* metadata", path, err)
	}
	return tok, nil
}
