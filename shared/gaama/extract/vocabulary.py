"""Word lists of the offline extractor: what never makes a concept label.

Written as running text (easier to read and extend than list literals); how they are used is in
:mod:`gaama.extract.concepts`.
"""

from __future__ import annotations


def words_of(text: str) -> frozenset[str]:
    """A word list written as running text (easier to read and extend than a list literal)."""
    return frozenset(text.split())


FUNCTION_WORDS = words_of(
    """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing done down during each either
    else even ever every for from further had has have having he her here hers herself him
    himself his how i if in into is it its itself just me mine more most my myself no nor not
    now of off on once only or other our ours ourselves out over own same she should so some
    such than that the their theirs them themselves then there these they this those through
    to too under until up upon very was we were what when where which while who whom whose why
    will with would you your yours yourself yourselves yet still though although via per
    im ive id ill youre youve youd youll dont didnt doesnt isnt wasnt arent werent cant couldnt
    wont wouldnt shouldnt thats theres whats lets hes shes theyre weve were ya u ur
    gonna wanna gotta kinda sorta lot lots bit
    """
)

#: Words that never make a concept on their own (too generic to connect related memories).
GENERIC_WORDS = words_of(
    """
    thing things stuff time times day days week weeks weekend month months year years today
    yesterday tomorrow tonight morning afternoon evening night moment moments while lot lots way
    ways people person guy guys kind sort bit part piece place places something anything
    everything nothing someone anyone everyone one ones life world idea ideas point fact matter
    case reason side end start stuff feeling feelings experience experiences others other
    friend friends folks everybody somebody anybody question questions answer chat talk news
    word words man woman men women kid kids child children family home situation chance
    opportunity lot number type example reminder look glad sure
    """
)

# Chit-chat, reactions, verbs and adjectives: they may sit inside a label ("art_class") but
# never at its edges, so "love painting" is trimmed to "painting".
EDGE_WORDS = words_of(
    """
    hey hi hello wow haha hahaha lol omg oh ah aw aww awww yeah yep yes nope okay ok ok thanks
    thank please sorry bye congrats congratulations cheers hmm um uh totally definitely really
    absolutely actually probably maybe perhaps pretty super quite truly literally seriously
    honestly basically especially always never often usually sometimes recently lately soon
    already again ago
    be go going went gone get got getting make made making take took taking see saw seen know
    knew think thought want wanted need needed like liked love loved loving feel felt feeling say
    said tell told try tried trying look looked looking come came give gave find found keep kept
    let put seem seemed help helped start started begin began hope hoped mean meant show showed
    share shared sharing check checked wait waited enjoy enjoyed use used bring brought means
    happen happened remember remembered mind thinking glad hear heard reach
    good great nice cool awesome amazing wonderful fantastic fun funny happy sad excited exciting
    proud special beautiful lovely sweet inspiring inspired powerful important hard tough
    interesting incredible real true whole similar different new old big small little long short
    best better worse worst favorite favourite first last next many much more most few several
    various certain able ready busy tired stoked thrilled grateful thankful lucky huge tiny
    crazy cute fine free full high low main major open own perfect positive negative awesome
    safe simple strong stressful super thoughtful worth wild blessed fulfilling meaningful
    rewarding supportive helpful valuable precious unique since ever anyway
    sound sounds sounded seems looks continue stand blend agree realize embrace express relax
    create chat chatted catch miss talk learn wish plan believe understand appreciate imagine
    guess suppose decide manage handle deal change grow move live stay leave run read write
    paint swim play watch join visit meet buy lose win care matter work sit stop turn call ask
    answer spend follow allow add set open close carry stand hold bring build become provide
    starting happening thinking doing getting going making trying looking feeling coming taking
    saying wondering hoping raising having giving keeping telling seeing putting letting
    well key easy vital future goal reality dream break progress tough awesome yay excellent
    accepted swamped thinkin doin goin nothin somethin lovin provoking plus back fancy
    talking self fam gorgeous yummy keen kind cheer around together must might huh nah yup woah
    whoa oop oops phew fyi pic pics mems fave fav bday far right remind bet young alone forward
    almost across whenever beyond towards toward without along everywhere past content bad
    normal insane lean needy blast sometime twice couple bunch lots plenty top least
    breathtaking stunning vivid resilient passionate imperfect cathartic uplifting genuine
    therapeutic emotional quiet bright cozy classical classic refreshing electric scary tranquil
    priceless empowering gratifying essential satisfying authentic abstract recent crucial
    optimistic unconditional instrumental inviting fleeting calming freeing wishing creating
    helping showing finding using encouraging spending wanting carrying dealing growing
    realizing asking knowing discovering affecting chatting lying standing expressing planning
    relaxing holding hanging playing sitting laying performing posing waving wearing smiling
    following opening appreciating fighting prioritizing researching learning exploring caring
    waking being meaning wondering living trying exist accept adopt choose prepare deserve
    offer pass teach inspire portray tackle apologize recommend spread fly capture celebrate
    explored ate played bought visited finished joined attended enjoyed loved wanted
    wanna gonna gotta outting
    """
)

# What small talk is made of; a sentence with no word outside these and the function words
# ("That's really cool!", "You've got guts") states nothing worth keeping.
CHATTER = words_of(
    """
    hey hi hello wow haha hahaha lol omg oh ah aw aww awww yeah yep yes nope okay ok thanks
    thank please sorry bye congrats congratulations cheers hmm um uh woah whoa oops phew yay
    totally definitely really absolutely actually probably maybe perhaps pretty super quite
    truly literally seriously honestly basically especially always never often usually
    sometimes good great nice cool awesome amazing wonderful fantastic fun funny happy glad
    excited exciting proud special beautiful lovely sweet inspiring powerful important
    interesting incredible sure true stoked thrilled grateful thankful lucky gorgeous
    be get got go going went gone make made do done feel felt seem seems sound sounds look
    looks keep kept guess bet hope mean love like wish know think see thing things stuff lot
    lots way ways time day today wonder wondering good-bye ya gonna wanna gotta kinda
    """
)

MONTH_WORDS = words_of(
    """
    january february march april may june july august september october november december
    monday tuesday wednesday thursday friday saturday sunday
    """
)

# Words that spoil a label even in its middle: numbers and days say when, not what.
BANNED_INSIDE = (
    FUNCTION_WORDS
    | MONTH_WORDS
    | words_of(
        """today yesterday tomorrow tonight two three four five six seven eight nine ten eleven
        twelve hundred thousand"""
    )
)

STOPWORDS = FUNCTION_WORDS | GENERIC_WORDS | EDGE_WORDS | MONTH_WORDS
