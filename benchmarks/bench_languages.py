"""Language detectors side by side (py3langid, lingua) and the Ukrainian stemmer choice, on texts written here.

Detectors: accuracy on short texts (a few words, as a query or a heading) and on sentences in
en/es/id/uk/ru/zh, each detector once open-set (every language it knows) and once restricted to
the languages chunkyard analyses; time per text after loading; load time. Stemmers: on groups of
Ukrainian word forms of one lemma, the share of same-lemma pairs that stem alike (conflation)
and of different-lemma pairs that collide. Writes `benchmarks/results/languages.{md,json}`.

    python -m benchmarks.bench_languages

`--retrieval` measures the embedding models per language instead: tests/data/multilingual (the same
6 short documents and 12 questions in en/es/id/uk/ar/hi/th, written for this project; each language
its own collection), English questions over each other language's documents, and the demo set
(docs/). Per model (ONNX int8) and chunk size: served / dense / BM25 hit@5, chunks, cl100k tokens
of the served top 5 and served recall within 1,024 tokens. Writes the "Retrieval per language"
section of languages.md and `languages_retrieval.json`.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path

from chunkyard.retrieval.settings.names import DEFAULT_CONFIG

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"

# (language, text); the first six of each language are short (2-5 words), the rest are sentences.
TEXTS: dict[str, list[str]] = {
    "en": [
        "open the settings",
        "where is the station",
        "cheap flights tomorrow",
        "how to reset a password",
        "the weather is nice",
        "quarterly revenue report",
        "The library opens at nine and closes early on Sundays.",
        "Our team moved the database to a new server last week.",
        "She planted tomatoes along the fence behind the house.",
        "If the build fails, check the logs before you retry it.",
        "The river flooded the lower streets after three days of rain.",
        "Children learn faster when the lessons are short and playful.",
    ],
    "es": [
        "abre la configuración",
        "dónde está la estación",
        "vuelos baratos mañana",
        "cómo cambiar la contraseña",
        "hace buen tiempo",
        "informe trimestral de ventas",
        "La biblioteca abre a las nueve y cierra temprano los domingos.",
        "Nuestro equipo trasladó la base de datos a un servidor nuevo.",
        "Ella plantó tomates junto a la valla detrás de la casa.",
        "Si la compilación falla, revisa los registros antes de repetirla.",
        "El río inundó las calles bajas después de tres días de lluvia.",
        "Los niños aprenden más rápido cuando las clases son breves.",
    ],
    "id": [
        "buka pengaturan",
        "di mana stasiunnya",
        "tiket pesawat murah besok",
        "cara mengganti kata sandi",
        "cuacanya sangat cerah",
        "laporan penjualan bulanan",
        "Perpustakaan buka pukul sembilan dan tutup lebih awal pada hari Minggu.",
        "Tim kami memindahkan basis data ke server baru minggu lalu.",
        "Dia menanam tomat di sepanjang pagar di belakang rumah.",
        "Jika proses gagal, periksa catatan sebelum mencoba lagi.",
        "Sungai meluap ke jalan-jalan setelah hujan selama tiga hari.",
        "Anak-anak belajar lebih cepat kalau pelajarannya singkat.",
    ],
    "uk": [
        "відкрий налаштування",
        "де знаходиться вокзал",
        "дешеві квитки на завтра",
        "як змінити пароль",
        "сьогодні гарна погода",
        "щоквартальний звіт про продажі",
        "Бібліотека відчиняється о дев'ятій і рано зачиняється в неділю.",
        "Наша команда перенесла базу даних на новий сервер минулого тижня.",
        "Вона посадила помідори вздовж паркану за будинком.",
        "Якщо збірка не вдалася, перевір журнали перед повторною спробою.",
        "Річка затопила нижні вулиці після трьох днів дощу.",
        "Діти вчаться швидше, коли уроки короткі й цікаві.",
    ],
    "ru": [
        "открой настройки",
        "где находится вокзал",
        "дешёвые билеты на завтра",
        "как сменить пароль",
        "сегодня хорошая погода",
        "ежеквартальный отчёт о продажах",
        "Библиотека открывается в девять и рано закрывается по воскресеньям.",
        "Наша команда перенесла базу данных на новый сервер на прошлой неделе.",
        "Она посадила помидоры вдоль забора за домом.",
        "Если сборка не удалась, проверь журналы перед повторной попыткой.",
        "Река затопила нижние улицы после трёх дней дождя.",
        "Дети учатся быстрее, когда уроки короткие и интересные.",
    ],
    "zh": [
        "打开设置",
        "车站在哪里",
        "明天的便宜机票",
        "如何重置密码",
        "今天天气很好",
        "季度销售报告",
        "图书馆九点开门，星期天提前关门。",
        "我们的团队上周把数据库迁移到了新服务器。",
        "她在房子后面的篱笆旁种了西红柿。",
        "如果构建失败，请先查看日志再重试。",
        "连续下了三天雨以后，河水淹没了低处的街道。",
        "课程简短有趣的时候，孩子们学得更快。",
    ],
}
SHORT = 6
SUPPORTED = ("en", "es", "id", "uk", "ru", "zh")

# Ukrainian word forms, one group per lemma (cases and numbers of nouns, forms of adjectives and verbs).
UKRAINIAN_GROUPS: list[list[str]] = [
    ["місто", "міста", "місту", "містом", "місті", "містах", "містами"],
    ["книга", "книги", "книзі", "книгу", "книгою", "книжок", "книгами"],
    ["вода", "води", "воді", "воду", "водою", "водами"],
    ["будинок", "будинку", "будинком", "будинки", "будинків", "будинками"],
    ["дерево", "дерева", "деревом", "дереві", "деревами"],
    ["студент", "студента", "студентові", "студентом", "студенти", "студентів"],
    ["земля", "землі", "землю", "землею", "землями"],
    ["пісня", "пісні", "пісню", "піснею", "пісень", "піснями"],
    ["новий", "нового", "новому", "новим", "нова", "нову", "нові", "нових"],
    ["великий", "великого", "великому", "велика", "великої", "великі"],
    ["українська", "української", "українській", "українську", "українською"],
    ["читати", "читаю", "читає", "читаємо", "читали", "читав"],
    ["працювати", "працюю", "працює", "працюють", "працювали", "працював"],
    ["писати", "пишу", "пише", "пишуть", "писали", "писав"],
    ["говорити", "говорю", "говорить", "говорять", "говорили"],
    ["робота", "роботи", "роботі", "роботу", "роботою", "робіт"],
    ["держава", "держави", "державі", "державу", "державою", "державами"],
    ["історія", "історії", "історію", "історією", "історіями"],
    ["мова", "мови", "мові", "мову", "мовою", "мовами"],
    ["річка", "річки", "річці", "річку", "річкою", "річок"],
]
# Unrelated words that share a beginning: a stemmer should keep each pair apart.
UKRAINIAN_DISTINCT = [
    ("міст", "місто"),
    ("водій", "вода"),
    ("робот", "робота"),
    ("пісок", "пісня"),
    ("сила", "село"),
    ("кіт", "кіно"),
    ("лис", "лист"),
    ("мир", "миска"),
    ("рік", "річка"),
    ("дім", "дим"),
    ("ліс", "лісник"),
    ("книга", "кнопка"),
]


def _py3langid(restrict: bool) -> Callable[[str], str]:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE)
    if restrict:
        identifier.set_languages(list(SUPPORTED))
    return lambda text: identifier.classify(text)[0]


def _lingua(restrict: bool) -> Callable[[str], str]:
    from lingua import IsoCode639_1, Language, LanguageDetectorBuilder

    if restrict:
        languages = [Language.from_iso_code_639_1(getattr(IsoCode639_1, c.upper())) for c in SUPPORTED]
        builder = LanguageDetectorBuilder.from_languages(*languages)
    else:
        builder = LanguageDetectorBuilder.from_all_languages()
    detector = builder.with_preloaded_language_models().build()

    def detect(text: str) -> str:
        language = detector.detect_language_of(text)
        return language.iso_code_639_1.name.lower() if language else "?"

    return detect


def _current_detector(restrict: bool) -> Callable[[str], str]:
    from chunkyard.retrieval.lexical.languages import detect_language

    # chunkyard maps Malay to the Indonesian analyzer, so `ms` counts as `id` here
    def detect(text: str) -> str:
        language = detect_language(text).language
        return "id" if language == "ms" else language

    return detect


DETECTORS = {"py3langid": _py3langid, "lingua": _lingua}


def measure_detectors() -> list[dict[str, object]]:
    rows = []
    for name, factory in [*DETECTORS.items(), ("chunkyard", _current_detector)]:
        for restrict in (False, True) if name != "chunkyard" else (True,):
            started = time.perf_counter()
            detect = factory(restrict)
            detect("warm up")
            load_s = time.perf_counter() - started
            correct = {"short": 0, "sentence": 0}
            wrong: list[str] = []
            timings = []
            for language, texts in TEXTS.items():
                for i, text in enumerate(texts):
                    t0 = time.perf_counter()
                    got = detect(text)
                    timings.append(time.perf_counter() - t0)
                    kind = "short" if i < SHORT else "sentence"
                    if got == language:
                        correct[kind] += 1
                    else:
                        wrong.append(f"{language}->{got}: {text[:30]}")
            n_short = SHORT * len(TEXTS)
            n_sentence = sum(len(t) for t in TEXTS.values()) - n_short
            rows.append(
                {
                    "detector": name,
                    "languages": ("supported 6" if restrict else "all")
                    if name != "chunkyard"
                    else "all, ms as id",
                    "short_accuracy": round(100 * correct["short"] / n_short, 1),
                    "sentence_accuracy": round(100 * correct["sentence"] / n_sentence, 1),
                    "ms_per_text": round(1000 * sum(timings) / len(timings), 3),
                    "load_s": round(load_s, 2),
                    "errors": wrong,
                }
            )
    return rows


def measure_ukrainian_stemmers() -> list[dict[str, object]]:
    import snowballstemmer
    from chunkyard.retrieval.lexical.analysis import Analyzer

    candidates: dict[str, Callable[[str], str]] = {
        "none (stop words only)": lambda w: w,
        "snowball russian": snowballstemmer.stemmer("russian").stemWord,
        "chunkyard ukrainian": lambda w: (Analyzer("ukrainian").analyze(w) or [w])[0],
    }
    rows = []
    for name, stem in candidates.items():
        stems = [[stem(w) for w in group] for group in UKRAINIAN_GROUPS]
        same = [a == b for group in stems for a, b in itertools.combinations(group, 2)]
        collide = [stem(a) == stem(b) for a, b in UKRAINIAN_DISTINCT]
        rows.append(
            {
                "stemmer": name,
                "same_lemma_pairs_conflated": round(100 * sum(same) / len(same), 1),
                "distinct_pairs_colliding": f"{sum(collide)}/{len(collide)}",
                "example": " ".join(stems[0]),
            }
        )
    return rows


def _site_size(package: str) -> str:
    import importlib

    module = importlib.import_module(package)
    folder = Path(module.__file__).parent
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return f"{size / 2**20:.1f} MiB"


RETRIEVAL_LANGUAGES = ("en", "es", "id", "uk", "ar", "hi", "th")
RETRIEVAL_MODELS = ("all-MiniLM-L6-v2", "multilingual-e5-small")
RETRIEVAL_SECTION = "## Retrieval per language and embedding model"
DATA = REPO_ROOT / "tests" / "data" / "multilingual"
# samples of public sets (benchmarks/public_samples.py): name -> language
PUBLIC_SETS = {"cmrc2018_dev_sample": "zh", "iapp_thai_wiki_qa_test_sample": "th", "facqa_test_sample": "id"}


def _question_sets(language: str, documents: list) -> list[tuple[str, list]]:
    """The language's questions, and (not for English) the English questions over its documents."""
    from dataclasses import replace

    from chunkyard.evaluation.datasets.evalset import read_eval_set

    own = read_eval_set(DATA / f"{language}_questions.jsonl", documents, on_missing="error").questions
    english_documents = sorted(p.name for p in (DATA / "en").glob("*.md"))
    if language == "en" or sorted(d.id for d in documents) != english_documents:
        return [(language, own)]  # `id` has articles of its own: the English questions do not ask about them
    english = [
        json.loads(line)["question"] for line in (DATA / "en_questions.jsonl").read_text().splitlines()
    ]
    return [
        (language, own),
        (f"en->{language}", [replace(q, text=t) for q, t in zip(own, english, strict=True)]),
    ]


def measure_retrieval(sizes: tuple[int, ...]) -> list[dict[str, object]]:
    """Each model x chunk size x language: build the index, evaluate served / dense / BM25 at k=5."""
    import tempfile
    from dataclasses import replace

    from chunkyard.chunking.types import Document
    from chunkyard.evaluation.datasets.squad import load_squad
    from chunkyard.evaluation.runner import SERVED_VARIANT, EvaluationRequest, evaluate_index
    from chunkyard.pipeline.graph import build_index
    from chunkyard.retrieval.embedders.embedder import load_embedder
    from chunkyard.retrieval.query import Searcher
    from chunkyard.retrieval.settings.config import IndexSpec, load_index_configs
    from chunkyard.retrieval.store import Store
    from chunkyard.retrieval.store.db import embedded_database_url

    from benchmarks.bench_embedder import load_demo_set

    store = Store(embedded_database_url(tempfile.mkdtemp(prefix="chunkyard-languages-")))
    store.migrate()
    demo, _ = load_demo_set()
    base = load_index_configs()[DEFAULT_CONFIG]
    rows: list[dict[str, object]] = []
    for model in RETRIEVAL_MODELS:
        embedder = load_embedder(model, backend="onnx", quantize="int8", batch_size=32)
        searcher = Searcher(store, embedder)
        for size in sizes:
            chunker = {**base.chunker, "size": size}
            config = replace(base, name=f"recursive-{size}-{model.split('-')[0].lower()}", chunker=chunker)
            config = replace(config, embedding_model=model, embedder={**base.embedder, "batch_size": 32})
            corpora = [
                (
                    language,
                    [
                        Document(p.name, p.read_text(encoding="utf-8"))
                        for p in sorted((DATA / language).glob("*.md"))
                    ],
                )
                for language in RETRIEVAL_LANGUAGES
            ]
            public = {
                name: load_squad(REPO_ROOT / "evaluation" / "datasets" / f"{name}.json", documents="articles")
                for name in PUBLIC_SETS
            }
            if demo is not None and size == 256:
                corpora.append(("demo", demo.documents))
            corpora += [(name, data.documents) for name, data in public.items()]
            for language, documents in corpora:
                spec = IndexSpec(f"languages-{language}", config)
                store.documents.sync(spec.collection, documents, [])
                build_index(store, spec, embedder)
                info = store.indexes.info(spec.name)
                if language == "demo":
                    sets = [("demo (en)", demo.questions)]
                elif language in public:
                    sets = [(f"{PUBLIC_SETS[language]} ({language})", public[language].questions)]
                else:
                    sets = _question_sets(language, documents)
                for label, questions in sets:
                    report = evaluate_index(
                        searcher,
                        spec,
                        questions,
                        EvaluationRequest(variants=("dense", "bm25", SERVED_VARIANT), k=5, n_resamples=200),
                        store=store,
                    )
                    served = report.metrics[SERVED_VARIANT]
                    rows.append(
                        {
                            "model": model,
                            "size": size,
                            "set": label,
                            "questions": len(questions),
                            "chunks": info["chunk_count"],
                            "analyzer": "+".join(info["analyzers"]),
                            **{
                                f"{mode}_hit_at_5": report.metrics[mode]["hit_at_5"]
                                for mode in ("dense", "bm25")
                            },
                            "served_hit_at_5": served["hit_at_5"],
                            "served_context_tokens_at_5": served["context_tokens_at_5"],
                            "served_budget_recall_1024": served["budget_recall_1024"],
                        }
                    )
                    print(rows[-1], flush=True)
    return rows


def write_retrieval(rows: list[dict[str, object]]) -> None:
    """The retrieval section of languages.md (replacing an earlier one) and its JSON."""
    import subprocess

    (RESULTS_DIR / "languages_retrieval.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    load = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.split(
        "load average:"
    )[-1]
    lines = [
        RETRIEVAL_SECTION,
        "",
        f"`python -m benchmarks.bench_languages --retrieval`, {time.strftime('%Y-%m-%d', time.gmtime())}, "
        f"2-core CPU, load average {load.strip()} at the end. tests/data/multilingual: the same 6 short "
        "documents and 12 questions in each language (written for this project), each language its own "
        "collection; `en->xx` asks the English questions over language xx's documents; demo: docs/ and "
        "its 38 questions. Config recursive-SIZE (sizes in each model's own tokens), `analyzer: auto`, "
        "ONNX int8, k=5. One question is 8.3 points. Tokens: cl100k tokens of the served top 5 "
        "(mean per question); recall@1024: served recall within a 1,024-token budget.",
        "",
        "| model | size | set | served hit@5 | dense hit@5 | BM25 hit@5 | chunks | analyzer "
        "| top-5 tokens | recall@1024 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['model']} | {row['size']} | {row['set']} | {100 * row['served_hit_at_5']:.1f} | "
            f"{100 * row['dense_hit_at_5']:.1f} | {100 * row['bm25_hit_at_5']:.1f} | {row['chunks']} | "
            f"{row['analyzer']} | {row['served_context_tokens_at_5']:.0f} | "
            f"{100 * row['served_budget_recall_1024']:.1f} |"
        )
    markdown = RESULTS_DIR / "languages.md"
    before, _, after = markdown.read_text(encoding="utf-8").partition(RETRIEVAL_SECTION)
    rest = after.split("\n## ", 1)[1] if "\n## " in after else ""  # the sections after it stay
    text = before.rstrip() + "\n\n" + "\n".join(lines) + "\n" + (f"\n## {rest}" if rest else "")
    markdown.write_text(text, encoding="utf-8")
    print("\n".join(lines))


def main() -> None:
    import sys

    if "--retrieval" in sys.argv[1:]:
        sizes = tuple(int(s) for s in sys.argv[sys.argv.index("--retrieval") + 1 :] if s.isdigit()) or (
            256,
            64,
        )
        write_retrieval(measure_retrieval(sizes))
        return
    detectors = measure_detectors()
    stemmers = measure_ukrainian_stemmers()
    sizes = {"py3langid": _site_size("py3langid"), "lingua": _site_size("lingua")}
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "languages.json").write_text(
        json.dumps({"detectors": detectors, "ukrainian_stemmers": stemmers, "sizes": sizes}, indent=2) + "\n",
        encoding="utf-8",
    )
    lines = [
        "| detector | languages | short texts % | sentences % | ms/text | load s |",
        "|---|---|---|---|---|---|",
    ]
    for row in detectors:
        lines.append(
            f"| {row['detector']} | {row['languages']} | {row['short_accuracy']} | "
            f"{row['sentence_accuracy']} | {row['ms_per_text']} | {row['load_s']} |"
        )
    lines += [
        "",
        f"installed size: {sizes}",
        "",
        "| Ukrainian stemmer | same-lemma pairs conflated % | unrelated pairs merged | forms of місто |",
        "|---|---|---|---|",
    ]
    for row in stemmers:
        lines.append(
            f"| {row['stemmer']} | {row['same_lemma_pairs_conflated']} | {row['distinct_pairs_colliding']} |"
            f" {row['example']} |"
        )
    print("\n".join(lines))
    for row in detectors:
        print(row["detector"], row["languages"], row["errors"])


if __name__ == "__main__":
    main()
