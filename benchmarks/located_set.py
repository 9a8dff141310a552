"""A small question set whose answers sit on known PDF pages and PPTX slides (for `bench_plugs_in`).

`write_located_set(folder)` writes three PDFs (matplotlib's PDF backend) and two decks (python-pptx)
and returns the questions, each with its answer text, file and page or slide. The answers include the
two the issue saw cut off (`2,60 $`, `472 consultas`) and a deck whose title slide is tiny.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PDFS: dict[str, list[str]] = {
    "harbour-guide.pdf": [
        "Harbour guide for visiting crews.\nThe harbour office opens at seven in the morning.\n"
        "Visitors register at the blue kiosk beside the gate.",
        "Mooring fees are charged per night.\nA berth for a yacht under twelve metres costs 2,60 $ per metre.\n"
        "Electricity and water are included in the fee.",
        "Fuel is sold at the south pier.\nThe fuel dock closes at six in the evening during winter.",
    ],
    "annual-report.pdf": [
        "Annual report of the ferry company.\nThe board met four times this year.",
        "Passenger numbers rose by eight percent.\n"
        "The customer desk answered 472 consultas from Spanish travellers.",
        "The new hybrid ferry enters service next April.\nIts batteries charge overnight in the harbour.",
        "Auditors signed the accounts in March.",
    ],
    "safety-card.pdf": [
        "Lifejackets are stored under every seat.\nChildren's lifejackets are kept at the purser's office.",
        "In an emergency, passengers gather at the muster station on deck five.\n"
        "The alarm is seven short blasts followed by one long blast.",
    ],
}

DECKS: dict[str, list[tuple[str, str]]] = {
    "lighthouse-review.pptx": [
        ("Lighthouse review", "Quarterly update"),
        ("Beacon upgrade", "The beacon upgrade ships in spring.\nSolar panels follow in summer."),
        ("Budget", "The keeper's cottage roof repair costs 18,000 euros.\nPainting the tower is postponed."),
        ("Questions", "Ask the operations team."),
    ],
    "crew-training.pptx": [
        ("Crew training", "Induction for new deckhands joining the fleet this season."),
        ("Knots", "Every deckhand must tie a bowline in under ten seconds."),
        ("Radio", "Channel 16 is reserved for distress calls and hailing.\nWorking channels are 12 and 14."),
        (
            "First aid",
            "The first aid course is renewed every three years.\nThe defibrillator hangs beside the bridge door.",
        ),
    ],
}


@dataclass(frozen=True)
class LocatedQuestion:
    """A question, its answer text, the file holding it and the page or slide (1-based) it is on."""

    question: str
    answer: str
    doc: str
    unit: str  # "page" or "slide"
    number: int


QUESTIONS = [
    LocatedQuestion(
        "How much does a berth cost per metre?", "2,60 $ per metre", "harbour-guide.pdf", "page", 2
    ),
    LocatedQuestion(
        "When does the fuel dock close in winter?",
        "closes at six in the evening",
        "harbour-guide.pdf",
        "page",
        3,
    ),
    LocatedQuestion(
        "When does the harbour office open?", "opens at seven in the morning", "harbour-guide.pdf", "page", 1
    ),
    LocatedQuestion(
        "How many consultas did the customer desk answer?", "472 consultas", "annual-report.pdf", "page", 2
    ),
    LocatedQuestion(
        "When does the hybrid ferry enter service?",
        "enters service next April",
        "annual-report.pdf",
        "page",
        3,
    ),
    LocatedQuestion(
        "When did the auditors sign the accounts?",
        "signed the accounts in March",
        "annual-report.pdf",
        "page",
        4,
    ),
    LocatedQuestion(
        "Where do passengers gather in an emergency?",
        "muster station on deck five",
        "safety-card.pdf",
        "page",
        2,
    ),
    LocatedQuestion(
        "What is the alarm signal?",
        "seven short blasts followed by one long blast",
        "safety-card.pdf",
        "page",
        2,
    ),
    LocatedQuestion(
        "Where are children's lifejackets kept?", "kept at the purser's office", "safety-card.pdf", "page", 1
    ),
    LocatedQuestion(
        "When does the beacon upgrade ship?", "ships in spring", "lighthouse-review.pptx", "slide", 2
    ),
    LocatedQuestion(
        "How much does the cottage roof repair cost?", "18,000 euros", "lighthouse-review.pptx", "slide", 3
    ),
    LocatedQuestion(
        "How fast must a deckhand tie a bowline?", "in under ten seconds", "crew-training.pptx", "slide", 2
    ),
    LocatedQuestion(
        "Which radio channel is for distress calls?",
        "Channel 16 is reserved for distress calls",
        "crew-training.pptx",
        "slide",
        3,
    ),
    LocatedQuestion(
        "Where is the defibrillator?", "beside the bridge door", "crew-training.pptx", "slide", 4
    ),
    LocatedQuestion(
        "How often is the first aid course renewed?",
        "renewed every three years",
        "crew-training.pptx",
        "slide",
        4,
    ),
]


def write_pdf(path: Path, pages: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    with PdfPages(path) as pdf:
        for text in pages:
            figure = plt.figure(figsize=(8, 3))
            figure.text(0.02, 0.5, text, fontsize=9)
            pdf.savefig(figure)
            plt.close(figure)


def write_deck(path: Path, slides: list[tuple[str, str]]) -> None:
    from pptx import Presentation

    deck = Presentation()
    for title, body in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text_frame.text = body
    deck.save(path)


def write_located_set(folder: Path) -> list[LocatedQuestion]:
    """The PDFs and decks written into `folder`; the questions about them."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, pages in PDFS.items():
        write_pdf(folder / name, pages)
    for name, slides in DECKS.items():
        write_deck(folder / name, slides)
    return list(QUESTIONS)
