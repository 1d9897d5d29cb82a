// Training a SentencePiece model with the library's own trainer, for test_sp_parts.c.
#include <cstdio>
#include <new>

#include <sentencepiece_trainer.h>

extern "C" int sp_test_train(const char *args, char *msg, size_t msg_cap)
{
	try {
		const auto status = sentencepiece::SentencePieceTrainer::Train(args);

		if (status.ok())
			return 0;
		std::snprintf(msg, msg_cap, "%s", status.ToString().c_str());
	} catch (const std::bad_alloc &) {
		std::snprintf(msg, msg_cap, "out of memory");
	}
	return -1;
}
