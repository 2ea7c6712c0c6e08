"""Word count: the classic streaming job, as in PyFlink's examples.

    streamjob run examples/word_count.py [--parallelism 2]

Each word is emitted with its running count (a rolling sum over a keyed stream).
"""

from streamjob.runtime import StreamExecutionEnvironment
from streamjob.runtime.connectors import PrintSink

TEXT = [
    "To be, or not to be, that is the question:",
    "Whether 'tis nobler in the mind to suffer",
    "The slings and arrows of outrageous fortune,",
    "Or to take arms against a sea of troubles",
    "And by opposing end them.",
]


def words(line: str):
    for word in line.lower().split():
        word = word.strip(".,:;'")
        if word:
            yield (word, 1)


def main() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    (
        env.from_collection(TEXT)
        .flat_map(words)
        .key_by(lambda t: t[0])
        .sum(1)
        .sink_to(PrintSink())
    )
    env.execute("word_count")


if __name__ == "__main__":
    main()
