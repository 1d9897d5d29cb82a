/*
 * The shmfeed command: a table of subcommands, each living in its own cmd_*.c, and the
 * argument parsing that several of them share.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include "shmfeed/shmfeed.h"
#include "cli/commands.h"
#include "common/config.h"
#include "common/proc.h"

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *usage; /* one line of `shmfeed --help` */
	const char *help;  /* `shmfeed NAME --help`: its usage, then one line per option */
};

#define JOB_HELP                                                                                   \
	"  JOB               the job's name (job: in its file); may be left out when only\n"       \
	"                    one job of this user runs\n"
#define KEY_HELP                                                                                   \
	"  --key FILE        the client's CURVE key pair (from `shmfeed keygen`) for a job\n"      \
	"                    served over tcp://; default $SHMFEED_CURVE_KEY\n"
#define SET_HELP                                                                                   \
	"  --set KEY=VALUE   override one field of the job file (dotted, e.g. batch.size=8,\n"     \
	"                    sources.1.weight=0.3); repeatable\n"
#define TOK_HELP                                                                                   \
	"  -e, --encoding E  r50k_base (gpt2), cl100k_base, o200k_base, bytes or char:CORPUS\n"    \
	"  --vocab FILE      the vocabulary; default $SHMFEED_VOCAB_DIR/ENCODING.tiktoken\n"       \
	"  --tokenizer FILE  instead of -e: a tokenizer file (.tiktoken, tekken, SentencePiece,\n" \
	"                    Hugging Face tokenizer.json)\n"                                       \
	"  --format F        with --tokenizer: auto (default), tiktoken, tekken, hf or\n"          \
	"                    sentencepiece\n"                                                      \
	"  --pattern REGEX   with a .tiktoken --tokenizer: its split pattern\n"
#define CONTROL_HELP(what)                                                                         \
	"usage: shmfeed " what " [JOB] [--key FILE]\n\n"                                           \
	"Sends the job the control request '" what "' and prints its state after.\n\n"             \
	"options:\n" JOB_HELP KEY_HELP "  -h, --help        this help\n"

static const struct command commands[] = {
	{"inspect", sf__cmd_inspect, "inspect JOB [--json]      arena header, participants, slots",
	 "usage: shmfeed inspect JOB [--json]\n\n"
	 "Reads a job's arena in /dev/shm directly (no control socket): its header, the\n"
	 "participants and every slot.\n\n"
	 "options:\n"
	 "  JOB               the job's name\n"
	 "  --json            one JSON object instead of text\n"
	 "  -h, --help        this help\n"},
	{"run", sf__cmd_run, "run CONFIG [--set K=V] [-- CMD ...]  run a job, supervise CMD",
	 "usage: shmfeed run CONFIG [--set KEY=VALUE ...] [-q|--quiet] [--grace-ms N]\n"
	 "                   [-- COMMAND [ARG ...]]\n\n"
	 "Runs the job of CONFIG: creates its arena, starts its producers and serves its\n"
	 "control socket. With a COMMAND (e.g. torchrun ...), runs it with SHMFEED_JOB set\n"
	 "and stops the job when it exits, with its exit status; without one, serves until\n"
	 "stopped (Ctrl-C, SIGTERM or `shmfeed stop`).\n\n"
	 "options:\n" SET_HELP
	 "  -q, --quiet       no progress line and no informational messages; errors only\n"
	 "  --grace-ms N      on a stop, how long the command may take to exit after the\n"
	 "                    signal is passed on to it before it is killed (SIGKILL);\n"
	 "                    default 10000\n"
	 "  -- COMMAND ...    the command to run under the job\n"
	 "  -h, --help        this help\n"},
	{"check", sf__cmd_check, "check CONFIG [--set K=V]  validate a job file, print it resolved",
	 "usage: shmfeed check CONFIG [--set KEY=VALUE ...] [--strict] [--tokens N]\n\n"
	 "Validates a job file and prints it resolved (every default filled in) as YAML,\n"
	 "with what each source path matches and the config digest. It opens every source\n"
	 "and loads the tokenizer as run does: exit status 1 wherever run would fail to\n"
	 "start before it tokenizes (a missing, unreadable or malformed file, too few\n"
	 "pre-tokenized tokens, a tokenizer or metrics file it cannot use). Raw text is not\n"
	 "tokenized here: text too short for one sequence, or a bad JSONL record, is found\n"
	 "when run starts, with the same message.\n\n"
	 "options:\n" SET_HELP
	 "  --tokens N        also print what a budget of N training tokens (suffix k, M,\n"
	 "                    G or T) takes from each source: samples, tokens, epochs\n"
	 "  --strict          accepted and ignored: check already fails where run would\n"
	 "                    before it tokenizes (a source path matching no file\n"
	 "                    included)\n"
	 "  -h, --help        this help\n"},
	{"encode", sf__cmd_encode,
	 "encode -e ENCODING         text on stdin to uint32 ids on stdout",
	 "usage: shmfeed encode TOKENIZER [--specials] [--records] < text > ids.u32\n"
	 "       shmfeed encode TOKENIZER --bench FILE\n"
	 "       shmfeed encode TOKENIZER --info\n"
	 "TOKENIZER: -e ENCODING [--vocab FILE], or --tokenizer FILE [--format F]\n"
	 "           [--pattern REGEX]\n\n"
	 "Encodes standard input as one document to little-endian uint32 ids.\n\n"
	 "options:\n" TOK_HELP
	 "  --specials        encode special tokens written in the text (<|endoftext|>) as\n"
	 "                    their ids; without it they are ordinary text\n"
	 "  --records         many documents: input records of a little-endian uint32 byte\n"
	 "                    count and the bytes; output per record a uint32 id count and\n"
	 "                    the ids\n"
	 "  --bench FILE      measure the single-core throughput on FILE instead\n"
	 "  --info            print the tokenizer's family, vocabulary size and bos/eos ids\n"
	 "  -h, --help        this help\n"},
	{"decode", sf__cmd_decode,
	 "decode -e ENCODING         uint32 ids on stdin to text on stdout",
	 "usage: shmfeed decode TOKENIZER < ids.u32 > text\n"
	 "TOKENIZER: -e ENCODING [--vocab FILE], or --tokenizer FILE [--format F]\n"
	 "           [--pattern REGEX]\n\n"
	 "Decodes little-endian uint32 ids on standard input to text.\n\n"
	 "options:\n" TOK_HELP "  -h, --help        this help\n"},
	{"status", sf__cmd_status,
	 "status [JOB] [--json] [--key FILE]  a running job: rates, slots, producers",
	 "usage: shmfeed status [JOB] [--json] [--key FILE]\n\n"
	 "Asks a running job's launcher once for its state and statistics.\n\n"
	 "options:\n" JOB_HELP
	 "  --json            the raw replies, {\"status\":...,\"stats\":...}\n" KEY_HELP
	 "  -h, --help        this help\n"},
	{"top", sf__cmd_top,
	 "top [JOB] [--count N] [--key FILE]  the same, refreshed every stats interval",
	 "usage: shmfeed top [JOB] [--count N] [--key FILE]\n\n"
	 "What `status` shows, redrawn every stats interval until Ctrl-C or the job ends.\n\n"
	 "options:\n" JOB_HELP "  --count N         stop after N updates\n" KEY_HELP
	 "  -h, --help        this help\n"},
	{"stop", sf__cmd_control, "stop [JOB] [--key FILE]   stop a running job (as SIGTERM does)",
	 CONTROL_HELP("stop")},
	{"pause", sf__cmd_control, "pause [JOB] [--key FILE]  pause a job's producers",
	 CONTROL_HELP("pause")},
	{"resume", sf__cmd_control, "resume [JOB] [--key FILE] resume a paused job",
	 CONTROL_HELP("resume")},
	{"seek", sf__cmd_seek,
	 "seek [JOB] --rank R --step S [--key FILE]  position a rank not yet attached",
	 "usage: shmfeed seek [JOB] --rank R --step S [--timeout SEC] [--key FILE]\n\n"
	 "Repositions local rank R's ring so that the consumer that attaches next reads step S\n"
	 "first (a rank with a consumer attached is refused: a consumer keeps its own\n"
	 "position, see Loader.load_state_dict). Waits for the reply, which comes once the\n"
	 "ring is repositioned (a slot a producer is filling is waited for), then prints the\n"
	 "job's state; after --timeout it says the seek is still pending in the job, which\n"
	 "goes on with it.\n\n"
	 "options:\n" JOB_HELP "  --rank R          the local rank, 0..ranks-1\n"
	 "  --step S          the step it reads next\n"
	 "  --timeout SEC     how long to wait for the reply, in seconds (default 60)\n" KEY_HELP
	 "  -h, --help        this help\n"},
	{"keygen", sf__cmd_keygen,
	 "keygen FILE               a CURVE key pair for tcp control: FILE, FILE.pub",
	 "usage: shmfeed keygen FILE\n\n"
	 "Writes a new CURVE key pair to FILE (mode 0600: a job's\n"
	 "control.curve_secret_key_file, or a client's --key) and its public key to\n"
	 "FILE.pub (a line of control.curve_allowed_clients); prints the public key.\n"
	 "Existing files are never replaced.\n\n"
	 "options:\n"
	 "  -h, --help        this help\n"},
	{"tokenize", sf__cmd_tokenize,
	 "tokenize CONFIG -o PREFIX  raw text sources to Megatron .bin/.idx",
	 "usage: shmfeed tokenize CONFIG -o PREFIX [--shard I/N] [--tokenizer FILE]\n"
	 "                        [--set KEY=VALUE ...] [-q]\n"
	 "       shmfeed tokenize --merge PART... -o PREFIX [-q]\n\n"
	 "Tokenizes the job's raw text sources once, to a Megatron dataset PREFIX.bin and\n"
	 "PREFIX.idx. With --shard I/N, only the I-th of N parts of the corpus (balanced by\n"
	 "bytes, documents whole), to PREFIX_IIIII-of-NNNNN.bin/.idx and a manifest .json;\n"
	 "--merge checks the parts against their manifests and writes the dataset one run\n"
	 "over the whole corpus writes, byte for byte (docs/tokenize-parts.md).\n\n"
	 "options:\n"
	 "  -o PREFIX         the output files' path without .bin/.idx\n"
	 "  --shard I/N       write part I (0 <= I < N) of N\n"
	 "  --tokenizer FILE  the tokenizer file instead of the job's tokenizer\n"
	 "                    (--set tokenizer.file=FILE, the encoding set aside)\n"
	 "  --merge PART...   merge parts (prefixes, or their .bin/.idx/.json paths)\n" SET_HELP
	 "  -q                no progress line\n"
	 "  -h, --help        this help\n"},
};

int sf__cli_job_args(int argc, char **argv, const char **ret_job, int *ret_json)
{
	*ret_job = NULL;
	*ret_json = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			*ret_json = 1;
		else if (argv[i][0] != '-' && !*ret_job)
			*ret_job = argv[i];
		else
			return -1;
	}
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: shmfeed COMMAND [ARGS...]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %s\n", commands[i].usage);
	fprintf(f, "  version                   print the version\n");
	fprintf(f, "\n`shmfeed COMMAND --help` describes a command's options.\n");
}

/*
 * A command's exit status, once what it printed has reached standard output: one that
 * succeeded but whose output could not be written (a full disk, /dev/full, a closed
 * pipe's EPIPE) exits 1 saying so; `check > resolved.yaml` on a full disk exited 0 with
 * an empty file (a review).
 */
static int stdout_written(int status)
{
	const int flushed = fflush(stdout) == 0;

	if (status || (flushed && !ferror(stdout)))
		return status;
	if (!flushed)
		fprintf(stderr, "shmfeed: cannot write standard output: %s\n", strerror(errno));
	else
		fprintf(stderr, "shmfeed: cannot write standard output\n");
	return 1;
}

/* 1 when a subcommand's arguments ask for its help; those after "--" are the command's. */
static int wants_help(int argc, char **argv)
{
	for (int i = 2; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return 1;
	return 0;
}

unsigned sf__cli_closed_std;

int main(int argc, char **argv)
{
	/* Started with 0, 1 or 2 closed (`2>&-`): the first files opened would take them,
	 * and log lines went into the arena. /dev/null holds their places; the commands
	 * whose data they carry (encode, decode) refuse to run on it. */
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
			sf__cli_closed_std |= 1u << fd;
			if (open("/dev/null", fd ? O_WRONLY : O_RDONLY) != fd)
				return 127;
		}
	/* run, tokenize and check fork workers and wait for them. */
	sf__children_waitable();
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return stdout_written(0);
	}
	if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
		printf("shmfeed %s (stream version %d)\n", sf_version(), SF_STREAM_VERSION);
		return stdout_written(0);
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[1], commands[i].name))
			return stdout_written(wants_help(argc, argv)
						      ? (fputs(commands[i].help, stdout), 0)
						      : commands[i].run(argc - 1, argv + 1));
	fprintf(stderr, "shmfeed: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
